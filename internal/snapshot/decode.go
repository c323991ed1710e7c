package snapshot

import (
	"bytes"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	sigsjson "sigs.k8s.io/json"
)

// fieldError is a decoding or validation problem at one field of an object.
type fieldError struct {
	field string
	msg   string
}

// unknownFields are the fields of an object that no Go type declares, by path.
type unknownFields []string

// decodeStrict decodes one JSON object into into as the API server would: field names match
// case-sensitively, a value of the wrong type is an error, and so is a field given twice.
// Fields the Go type does not declare are returned for the caller to judge, because a
// snapshot of a newer cluster may carry fields this build of the Kubernetes types lacks.
func decodeStrict(data []byte, into any) (unknownFields, *fieldError) {
	strictErrs, err := sigsjson.UnmarshalStrict(data, into, sigsjson.DisallowDuplicateFields, sigsjson.DisallowUnknownFields)
	if err != nil {
		field, msg := locate(data, reflect.TypeOf(into), "")
		if msg == "" {
			// locate re-decodes piece by piece; an error it cannot reproduce still stops us.
			msg = cleanMessage(err.Error())
		}
		return nil, &fieldError{field: field, msg: msg}
	}
	var unknown unknownFields
	for _, e := range strictErrs {
		path := ""
		var fe sigsjson.FieldError
		if errors.As(e, &fe) {
			path = fe.FieldPath()
		}
		if strings.HasPrefix(e.Error(), "duplicate field") {
			return nil, &fieldError{field: path, msg: "given twice"}
		}
		unknown = append(unknown, path)
	}
	return unknown, nil
}

// locate finds the innermost field of data whose value does not decode into its Go type and
// says what is wrong with it. The JSON decoder's own error names a field only for plain type
// mismatches; values with their own decoders (quantities, times, durations, int-or-string)
// fail without a path, so the object is re-decoded one field at a time until the failure
// reproduces at a leaf.
func locate(data []byte, t reflect.Type, path string) (string, string) {
	err := sigsjson.UnmarshalCaseSensitivePreserveInts(data, reflect.New(derefType(t)).Interface())
	if err == nil {
		return "", ""
	}
	t = derefType(t)
	if hasOwnDecoder(t) {
		return path, leafMessage(err, t, data)
	}
	switch t.Kind() {
	case reflect.Struct:
		var fields map[string]json.RawMessage
		if json.Unmarshal(data, &fields) != nil {
			return path, leafMessage(err, t, data)
		}
		for _, key := range sortedKeys(fields) {
			ft, ok := fieldType(t, key)
			if !ok {
				continue
			}
			if p, msg := locate(fields[key], ft, joinPath(path, key)); msg != "" {
				return p, msg
			}
		}
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 {
			return path, leafMessage(err, t, data)
		}
		var items []json.RawMessage
		if json.Unmarshal(data, &items) != nil {
			return path, leafMessage(err, t, data)
		}
		for i, item := range items {
			if p, msg := locate(item, t.Elem(), fmt.Sprintf("%s[%d]", path, i)); msg != "" {
				return p, msg
			}
		}
	case reflect.Map:
		var entries map[string]json.RawMessage
		if json.Unmarshal(data, &entries) != nil {
			return path, leafMessage(err, t, data)
		}
		for _, key := range sortedKeys(entries) {
			if p, msg := locate(entries[key], t.Elem(), fmt.Sprintf("%s[%s]", path, key)); msg != "" {
				return p, msg
			}
		}
	}
	return path, leafMessage(err, t, data)
}

func derefType(t reflect.Type) reflect.Type {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t
}

var (
	jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
)

func hasOwnDecoder(t reflect.Type) bool {
	p := reflect.PointerTo(t)
	return t.Implements(jsonUnmarshaler) || p.Implements(jsonUnmarshaler) ||
		t.Implements(textUnmarshaler) || p.Implements(textUnmarshaler)
}

// jsonField is one JSON key a struct accepts and the Go type behind it.
type jsonField struct {
	name string
	typ  reflect.Type
}

// jsonFields lists the JSON keys a struct accepts, in declaration order, looking through
// embedded and inline structs the way encoding/json does.
func jsonFields(t reflect.Type) []jsonField {
	var out []jsonField
	for i := range t.NumField() {
		f := t.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" && opts == "" {
			continue
		}
		if name == "" && (f.Anonymous || strings.Contains(opts, "inline")) {
			if inner := derefType(f.Type); inner.Kind() == reflect.Struct {
				out = append(out, jsonFields(inner)...)
			}
			continue
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out = append(out, jsonField{name: name, typ: f.Type})
	}
	return out
}

// fieldType finds the Go type behind a JSON key of a struct.
func fieldType(t reflect.Type, key string) (reflect.Type, bool) {
	for _, f := range jsonFields(t) {
		if f.name == key {
			return f.typ, true
		}
	}
	return nil, false
}

// jsonNames lists the JSON keys a struct accepts, for suggestions.
func jsonNames(t reflect.Type) []string {
	var out []string
	for _, f := range jsonFields(t) {
		out = append(out, f.name)
	}
	return out
}

// suggest names the declared field an unknown field was probably meant to be: the same name
// in another case, or one typo away. Hand-edited YAML gets field case wrong more than anything.
func suggest(root reflect.Type, path string) string {
	segs := splitPath(path)
	if len(segs) == 0 {
		return ""
	}
	t := derefType(root)
	for _, seg := range segs[:len(segs)-1] {
		switch {
		case strings.HasPrefix(seg, "["):
			if t.Kind() != reflect.Slice && t.Kind() != reflect.Array && t.Kind() != reflect.Map {
				return ""
			}
			t = derefType(t.Elem())
		default:
			if t.Kind() != reflect.Struct {
				return ""
			}
			ft, ok := fieldType(t, seg)
			if !ok {
				return ""
			}
			t = derefType(ft)
		}
	}
	if t.Kind() != reflect.Struct {
		return ""
	}
	last := segs[len(segs)-1]
	names := jsonNames(t)
	for _, n := range names {
		if strings.EqualFold(n, last) {
			return n
		}
	}
	for _, n := range names {
		if editDistance(n, last) <= 2 && len(n) > 3 {
			return n
		}
	}
	return ""
}

// splitPath splits "spec.catalog[0].migProfiles" into "spec", "catalog", "[0]", "migProfiles".
func splitPath(path string) []string {
	var out []string
	for _, part := range strings.Split(path, ".") {
		for part != "" {
			i := strings.IndexByte(part, '[')
			switch {
			case i < 0:
				out = append(out, part)
				part = ""
			case i > 0:
				out = append(out, part[:i])
				part = part[i:]
			default:
				j := strings.IndexByte(part, ']')
				if j < 0 {
					out = append(out, part)
					part = ""
					continue
				}
				out = append(out, part[:j+1])
				part = part[j+1:]
			}
		}
	}
	return out
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

var (
	quantityType    = reflect.TypeFor[resource.Quantity]()
	timeType        = reflect.TypeFor[metav1.Time]()
	microTimeType   = reflect.TypeFor[metav1.MicroTime]()
	durationType    = reflect.TypeFor[metav1.Duration]()
	intOrStringType = reflect.TypeFor[intstr.IntOrString]()
)

// wants says in a user's words what a Go type takes.
func wants(t reflect.Type) string {
	switch t {
	case quantityType:
		return "a quantity such as 8, 500m or 64Gi"
	case timeType, microTimeType:
		return "an RFC 3339 time such as 2026-11-29T12:00:00Z"
	case durationType:
		return "a duration such as 30s or 15m"
	case intOrStringType:
		return "an integer or a string"
	}
	switch t.Kind() {
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Slice, reflect.Array:
		return "a list"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return "a value of type " + t.String()
}

// got names the JSON type of a value.
func got(data []byte) string {
	data = bytes.TrimSpace(data)
	if len(data) == 0 {
		return "nothing"
	}
	switch data[0] {
	case '"':
		var s string
		if json.Unmarshal(data, &s) == nil {
			return "string " + strconv.Quote(s)
		}
		return "a string"
	case '{':
		return "an object"
	case '[':
		return "a list"
	case 't', 'f':
		return "boolean " + string(data)
	case 'n':
		return "null"
	}
	return "number " + string(data)
}

// leafMessage says what is wrong with one value that does not decode into t.
func leafMessage(err error, t reflect.Type, data []byte) string {
	msg := cleanMessage(err.Error())
	g := got(data)
	if hasOwnDecoder(t) && (g == "an object" || g == "a list") {
		// Such types only read scalars; their own errors talk about regular expressions.
		return fmt.Sprintf("want %s, got %s", wants(t), g)
	}
	if !strings.Contains(msg, "cannot unmarshal") {
		return msg
	}
	if num, ok := strings.CutPrefix(g, "number "); ok && wants(t) == "an integer" {
		if strings.ContainsAny(num, ".eE") {
			return fmt.Sprintf("want a whole number, got %s", num)
		}
		return fmt.Sprintf("number %s does not fit in %s", num, t.Kind())
	}
	return fmt.Sprintf("want %s, got %s", wants(t), g)
}

// cleanMessage drops the decoder's package prefix: the user wrote YAML, not Go.
func cleanMessage(msg string) string {
	msg = strings.TrimPrefix(msg, "json: ")
	msg = strings.TrimPrefix(msg, "error converting YAML to JSON: ")
	return msg
}
