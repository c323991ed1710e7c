package snapshot

// Splitting the input into documents: a JSON stream or YAML documents separated by "---", each
// with where it starts, so that every later error points at its place in the file.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"
)

// doc is one document of the input, as JSON.
type doc struct {
	index int
	line  int // first line in the input, for YAML; 0 for JSON
	data  []byte
}

func (d doc) where() string {
	if d.line > 0 {
		return fmt.Sprintf("document %d (line %d)", d.index, d.line)
	}
	return fmt.Sprintf("document %d", d.index)
}

// documents splits the input into JSON documents. JSON input (what kubectl -o json prints)
// is read as a stream of values; anything else as YAML documents separated by "---" lines.
func documents(data []byte) ([]doc, error) {
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 {
		return nil, &Error{Message: "the input is empty: want a List of objects such as kubectl get -o yaml prints"}
	}
	if trimmed[0] == '{' {
		return jsonDocuments(trimmed)
	}
	return yamlDocuments(data)
}

func jsonDocuments(data []byte) ([]doc, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	var docs []doc
	for {
		var raw json.RawMessage
		err := dec.Decode(&raw)
		if err == io.EOF {
			return docs, nil
		}
		if err != nil {
			d := doc{index: len(docs)}
			return nil, &Error{Where: d.where(), Message: fmt.Sprintf("invalid JSON at line %d: %s",
				lineAt(data, dec.InputOffset()), cleanMessage(err.Error()))}
		}
		docs = append(docs, doc{index: len(docs), data: raw})
	}
}

func lineAt(data []byte, offset int64) int {
	offset = min(max(offset, 0), int64(len(data)))
	return bytes.Count(data[:offset], []byte("\n")) + 1
}

// yamlLine finds the line numbers yaml error messages carry, relative to their document.
var yamlLine = regexp.MustCompile(`line (\d+)`)

func yamlDocuments(data []byte) ([]doc, error) {
	var docs []doc
	var cur bytes.Buffer
	start, lineNo := 1, 0
	flush := func() error {
		body := cur.Bytes()
		first := start
		cur.Reset()
		if blank(body) {
			return nil
		}
		d := doc{index: len(docs), line: first}
		js, err := yaml.YAMLToJSONStrict(body)
		if err != nil {
			msg := yamlLine.ReplaceAllStringFunc(cleanMessage(err.Error()), func(m string) string {
				n, _ := strconv.Atoi(strings.TrimPrefix(m, "line "))
				return fmt.Sprintf("line %d", n+first-1)
			})
			return &Error{Where: d.where(), Message: "invalid YAML: " + msg}
		}
		d.data = js
		docs = append(docs, d)
		return nil
	}
	for line := range bytes.Lines(data) {
		lineNo++
		if isSeparator(line) {
			if err := flush(); err != nil {
				return nil, err
			}
			start = lineNo + 1
			continue
		}
		cur.Write(line)
	}
	if err := flush(); err != nil {
		return nil, err
	}
	if len(docs) == 0 {
		return nil, &Error{Message: "the input holds no object, only comments and blank lines"}
	}
	return docs, nil
}

// isSeparator reports a YAML document separator: "---" alone or followed by a comment.
func isSeparator(line []byte) bool {
	rest, ok := bytes.CutPrefix(line, []byte("---"))
	if !ok {
		return false
	}
	rest = bytes.TrimSpace(rest)
	return len(rest) == 0 || rest[0] == '#'
}

// blank reports a document of nothing but whitespace and comments.
func blank(body []byte) bool {
	for line := range bytes.Lines(body) {
		line = bytes.TrimSpace(line)
		if len(line) > 0 && line[0] != '#' {
			return false
		}
	}
	return true
}
