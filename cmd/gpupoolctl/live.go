package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// liveTimeout bounds every command that talks to the cluster, so an unreachable API server
// ends in an error instead of a hang.
const liveTimeout = 60 * time.Second

// kubeFlags are the flags every live command takes, spelled as kubectl spells them so that
// "kubectl gpupool ... --context prod -n team-a" reads as any kubectl command.
type kubeFlags struct {
	kubeconfig, context, namespace string
}

func addKubeFlags(fs *flag.FlagSet) *kubeFlags {
	k := &kubeFlags{}
	fs.StringVar(&k.kubeconfig, "kubeconfig", "", "path to the kubeconfig `file`; default: $KUBECONFIG, then ~/.kube/config")
	fs.StringVar(&k.context, "context", "", "kubeconfig `context` to use; default: the current context")
	fs.StringVar(&k.namespace, "n", "", "`namespace` of the pod; default: the context's namespace, else default")
	fs.StringVar(&k.namespace, "namespace", "", "same as -n")
	return k
}

// connect builds a client for the cluster the flags name, and the namespace to use.
func (k *kubeFlags) connect() (client.Client, string, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = k.kubeconfig
	cfg := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: k.context})
	rest, err := cfg.ClientConfig()
	if err != nil {
		return nil, "", fmt.Errorf("reading the kubeconfig: %w (set --kubeconfig or KUBECONFIG)", err)
	}
	rest.UserAgent = "kubectl-gpupool"
	ns := k.namespace
	if ns == "" {
		if ns, _, err = cfg.Namespace(); err != nil || ns == "" {
			ns = corev1.NamespaceDefault
		}
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, "", err
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return nil, "", err
	}
	c, err := client.New(rest, client.Options{Scheme: scheme})
	if err != nil {
		return nil, "", fmt.Errorf("connecting to %s: %w", rest.Host, err)
	}
	return c, ns, nil
}

// parseInterleaved parses flags that may come after positional arguments ("why POD -n ns"),
// as kubectl allows, and returns the positional arguments.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return positional, nil
		}
		positional = append(positional, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

// command is what every live subcommand shares: its name for messages, its flags, and the
// output format.
type command struct {
	name   string
	fs     *flag.FlagSet
	kube   *kubeFlags
	output string
	stdout io.Writer
	stderr io.Writer
}

func newCommand(program, sub string, stdout, stderr io.Writer, withOutput bool) *command {
	c := &command{name: program + " " + sub, fs: flag.NewFlagSet(program+" "+sub, flag.ContinueOnError), stdout: stdout, stderr: stderr}
	c.fs.SetOutput(io.Discard)
	c.kube = addKubeFlags(c.fs)
	c.output = "table"
	if withOutput {
		c.fs.StringVar(&c.output, "o", "table", "output `format`: table, json or yaml")
		c.fs.StringVar(&c.output, "output", "table", "same as -o")
	}
	return c
}

// parse parses the flags, prints help on -h, and checks the output format. done is true when
// the command should return code right away.
func (c *command) parse(args []string, help string) (positional []string, code int, done bool) {
	positional, err := parseInterleaved(c.fs, args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprintf(c.stdout, "%s", help)
		c.fs.SetOutput(c.stdout)
		c.fs.PrintDefaults()
		return nil, exitOK, true
	}
	if err != nil {
		return nil, c.fail("%v (see %s --help)", err, c.name), true
	}
	if c.output != "table" && c.output != "json" && c.output != "yaml" {
		return nil, c.fail("-o %q: want table, json or yaml", c.output), true
	}
	return positional, exitOK, false
}

func (c *command) fail(format string, a ...any) int {
	fmt.Fprintf(c.stderr, "%s: %s\n", c.name, fmt.Sprintf(format, a...))
	return exitInvalid
}

// failed reports an error that is not a usage mistake (the cluster refused, the object is
// gone) and returns exitFailed.
func (c *command) failed(err error) int {
	fmt.Fprintf(c.stderr, "%s: %v\n", c.name, err)
	return exitFailed
}

// emit writes v as JSON or YAML for -o json|yaml.
func (c *command) emit(v any) int {
	data, err := json.MarshalIndent(v, "", "  ")
	if err == nil && c.output == "yaml" {
		data, err = yaml.JSONToYAML(data)
	} else if err == nil {
		data = append(data, '\n')
	}
	if err != nil {
		return c.failed(fmt.Errorf("encoding %s: %w", c.output, err))
	}
	if _, err := c.stdout.Write(data); err != nil {
		return c.failed(err)
	}
	return exitOK
}

// session is one live command's connection: its positional arguments, the client, the
// namespace, and a context bounded by liveTimeout.
type session struct {
	args      []string
	ctx       context.Context
	cancel    context.CancelFunc
	client    client.Client
	namespace string
}

// open parses the flags, checks the positional arguments with arity (which says what is
// wrong, or ""), and connects. done is true when the command should return code right away.
func (c *command) open(args []string, help string, arity func(positional []string) string) (s *session, code int, done bool) {
	positional, code, done := c.parse(args, help)
	if done {
		return nil, code, true
	}
	if why := arity(positional); why != "" {
		return nil, c.fail("%s", why), true
	}
	kc, ns, err := c.kube.connect()
	if err != nil {
		return nil, c.failed(err), true
	}
	ctx, cancel := context.WithTimeout(context.Background(), liveTimeout)
	return &session{args: positional, ctx: ctx, cancel: cancel, client: kc, namespace: ns}, exitOK, false
}

// live runs body on a connected session (see open) and cancels the session's context when body
// returns: every live subcommand is this shape.
func (c *command) live(args []string, help string, arity func(positional []string) string, body func(*session) int) int {
	s, code, done := c.open(args, help, arity)
	if done {
		return code
	}
	defer s.cancel()
	return body(s)
}

// atMostOne is the arity of commands that take an optional name.
func atMostOne(what string) func([]string) string {
	return func(p []string) string {
		if len(p) > 1 {
			return "want at most one " + what
		}
		return ""
	}
}
