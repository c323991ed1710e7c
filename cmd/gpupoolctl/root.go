package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// liveTimeout bounds every one-shot command that talks to the cluster, so an unreachable API
// server ends in an error instead of a hang; --watch runs until interrupted or --request-timeout.
const liveTimeout = 60 * time.Second

// scheme holds the kinds the tool reads and prints, so that printed objects carry their
// apiVersion and kind as kubectl prints them.
var scheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		panic(err)
	}
	if err := v1alpha1.AddToScheme(s); err != nil {
		panic(err)
	}
	return s
}()

const rootLong = `%[1]s inspects and plans gpupool's MIG repartitioning.

Commands on the live cluster (the kubeconfig's current context, or --context):
  status [POLICY]          each pool's nodes and layouts, demand per shape, stranded MIG instances, the plan's progress
  why POD [-n NS]          why a GPU pod is pending (or what a running one holds): the layer, the blocking
                           dimension, the node matrix, and what the current or next plan does about it
  plan [PLAN]              list the RepartitionPlans, or show one node by node
  approve PLAN             approve a plan, bound to its hash (read from the plan itself)
  reject PLAN --reason R   reject a plan
  what-if --live           the plans gpupool would propose now, computed here; nothing is written
  rightsize [-n NS | -A]   the MIG profile each GPU workload needs, from the memory its pods use

Offline:
  what-if -f SNAPSHOT      the same for a saved snapshot (kubectl get nodes,pods,pdb,gpunodes,gpupoolpolicies -A -o yaml)

The connection flags are kubectl's (--kubeconfig, --context, -n, --as, --as-group, --server,
--token, --request-timeout...), and so are the output formats: -o json|yaml|name|wide|
jsonpath=...|go-template=... Shell completion: %[1]s completion bash|zsh|fish|powershell.
Exit status: 0 on success, 2 on unreadable or invalid input or a usage mistake, 1 otherwise.`

// cli is what every subcommand shares: the program's name, the connection flags, the streams.
type cli struct {
	name   string
	config *genericclioptions.ConfigFlags
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
}

func newRoot(name string, stdin io.Reader, stdout, stderr io.Writer) *cobra.Command {
	c := &cli{name: name, config: genericclioptions.NewConfigFlags(true), stdin: stdin, stdout: stdout, stderr: stderr}
	root := &cobra.Command{
		Use:   "gpupoolctl",
		Short: "Inspect and plan gpupool's MIG repartitioning",
		Long:  fmt.Sprintf(rootLong, name),
		// kubectl plugins name themselves "kubectl <plugin>" in usage lines and messages.
		Annotations:   map[string]string{cobra.CommandDisplayNameAnnotation: name},
		SilenceErrors: true,
		SilenceUsage:  true,
		RunE: func(*cobra.Command, []string) error {
			return usageError("name a command (see %s --help)", name)
		},
	}
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	c.config.AddFlags(root.PersistentFlags())
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		return usageError("%v (see %s --help)", err, cmd.CommandPath())
	})
	root.AddCommand(c.statusCommand(), c.whyCommand(), c.planCommand(), c.decideCommand("approve"), c.decideCommand("reject"),
		c.whatIfCommand(), c.rightsizeCommand())
	return root
}

// connect builds a client for the cluster the flags name, and the namespace to use: -n, else
// the context's, else default.
func (c *cli) connect() (client.WithWatch, string, error) {
	rest, err := c.config.ToRESTConfig()
	if err != nil {
		return nil, "", failure(fmt.Errorf("reading the kubeconfig: %w (set --kubeconfig or KUBECONFIG)", err))
	}
	rest.UserAgent = "kubectl-gpupool"
	ns, _, err := c.config.ToRawKubeConfigLoader().Namespace()
	if err != nil || ns == "" {
		ns = corev1.NamespaceDefault
	}
	kc, err := client.NewWithWatch(rest, client.Options{Scheme: scheme})
	if err != nil {
		return nil, "", failure(fmt.Errorf("connecting to %s: %w", rest.Host, err))
	}
	return kc, ns, nil
}

// session is one live command's connection: the client, the namespace, and a context bounded by
// liveTimeout.
type session struct {
	ctx       context.Context
	cancel    context.CancelFunc
	client    client.WithWatch
	namespace string
}

// open connects; watch sessions are not bounded by liveTimeout.
func (c *cli) open(watch bool) (*session, error) {
	kc, ns, err := c.connect()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), liveTimeout)
	if watch {
		ctx, cancel = context.WithCancel(context.Background())
	}
	return &session{ctx: ctx, cancel: cancel, client: kc, namespace: ns}, nil
}

// exactlyOne and atMostOne check positional arguments, as usage mistakes.
func exactlyOne(msg string) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		if len(args) != 1 {
			return usageError("%s", msg)
		}
		return nil
	}
}

func atMostOne(what string) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		if len(args) > 1 {
			return usageError("want at most one %s", what)
		}
		return nil
	}
}

// complete returns a completion function listing the names of list's objects (in the
// namespace for namespaced kinds), for commands that take one name; it is a single List.
func (c *cli) complete(newList func() client.ObjectList, namespaced bool) cobra.CompletionFunc {
	return func(_ *cobra.Command, args []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		kc, ns, err := c.connect()
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		list := newList()
		var opts []client.ListOption
		if namespaced {
			opts = append(opts, client.InNamespace(ns))
		}
		if err := kc.List(ctx, list, opts...); err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var names []cobra.Completion
		items, _ := listItems(list)
		for _, o := range items {
			names = append(names, o.GetName())
		}
		return names, cobra.ShellCompDirectiveNoFileComp
	}
}
