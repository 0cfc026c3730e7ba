package etcdbackup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/kos-sdn/kos/internal/cmdline"
)

// The exit codes of kos-etcd-backup, which scripts and the CronJob's
// history can trust.
const (
	// ExitOK: everything asked for was done (a defragmentation skipped by
	// policy counts as done).
	ExitOK = cmdline.ExitOK
	// ExitError: it failed; save wrote no new snapshot, restore changed
	// nothing.
	ExitError = cmdline.ExitError
	// ExitUsage: the command line was wrong; nothing was done.
	ExitUsage = cmdline.ExitUsage
	// ExitPartial: save wrote a new verified snapshot into --dir, but a
	// later step (upload, pruning, defragmentation) failed.
	ExitPartial = 3
)

// The environment variables that configure the S3 copy, so that a CronJob
// can take them from an optional Secret.
const (
	// S3Env is the default of --s3.
	S3Env = "KOS_ETCD_BACKUP_S3"
	// S3EndpointEnv is the default of --s3-endpoint, the same variable
	// channels reads for s3:// locations.
	S3EndpointEnv = "S3_ENDPOINT"
)

// partialError marks a failure after a snapshot was saved.
type partialError struct{ err error }

func (e partialError) Error() string { return e.err.Error() }
func (e partialError) Unwrap() error { return e.err }

// Main runs kos-etcd-backup with args and returns its exit code. What it did
// goes to stdout, one line per step; an error goes to stderr, once, on one
// line.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cmd := NewCommand(stdout, stderr)
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(ctx)
	code := cmdline.Exit(stderr, err)
	var partial partialError
	if code == ExitError && errors.As(err, &partial) {
		return ExitPartial
	}
	return code
}

// NewCommand returns the kos-etcd-backup command.
func NewCommand(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:   "kos-etcd-backup",
		Short: "Back up, defragment and restore the etcd of the KOS API",
		Long: `kos-etcd-backup keeps the data of the KOS API (kos-etcd) safe: "save" takes a
snapshot into a folder (and, when configured, to S3) and keeps the newest
ones; "defrag" gives back the space etcd keeps after compaction, one member at
a time; "restore" makes a member's data folder from a snapshot, after checking
its hashes. Exit codes: 0 done, 1 failed (nothing saved or changed), 2 wrong
command line, 3 snapshot saved but a later step (upload, pruning,
defragmentation) failed.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		// An unknown command is a usage error, as a wrong flag is.
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return cmdline.Usage(fmt.Errorf("unknown command %q: save, defrag or restore", args[0]))
			}
			return nil
		},
		RunE: func(*cobra.Command, []string) error {
			return cmdline.Usage(errors.New("name a command: save, defrag or restore (kos-etcd-backup --help)"))
		},
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return cmdline.Usage(err) })
	root.AddCommand(newSaveCommand(stdout), newDefragCommand(stdout), newRestoreCommand(stdout))
	return root
}

// ClientOptions reach the etcd cluster, with etcdctl's flag names.
type ClientOptions struct {
	Endpoints   []string
	CACert      string
	Cert        string
	Key         string
	DialTimeout time.Duration
}

func (o *ClientOptions) addFlags(fs *pflag.FlagSet) {
	fs.StringSliceVar(&o.Endpoints, "endpoints", o.Endpoints, "Client URLs of the etcd members, comma-separated.")
	fs.StringVar(&o.CACert, "cacert", o.CACert, "CA bundle that signs the members' serving certificates; empty means plain HTTP.")
	fs.StringVar(&o.Cert, "cert", o.Cert, "Client certificate file.")
	fs.StringVar(&o.Key, "key", o.Key, "Client key file.")
	fs.DurationVar(&o.DialTimeout, "dial-timeout", 10*time.Second, "How long to wait for a connection to etcd.")
}

func (o *ClientOptions) validate() []error {
	var errs []error
	if len(o.Endpoints) == 0 {
		errs = append(errs, errors.New("--endpoints is empty"))
	}
	if (o.Cert == "") != (o.Key == "") {
		errs = append(errs, errors.New("--cert and --key go together"))
	}
	return errs
}

// client connects to etcd. Its certificates are read again at every
// handshake, so a long run sees kos-pki's renewals.
func (o *ClientOptions) client() (*clientv3.Client, error) {
	cfg := clientv3.Config{Endpoints: o.Endpoints, DialTimeout: o.DialTimeout, Logger: zap.NewNop()}
	if o.CACert != "" || o.Cert != "" {
		info := transport.TLSInfo{TrustedCAFile: o.CACert, CertFile: o.Cert, KeyFile: o.Key}
		tlsConfig, err := info.ClientConfig()
		if err != nil {
			return nil, fmt.Errorf("loading the etcd client certificates: %w", err)
		}
		cfg.TLS = tlsConfig
	}
	c, err := clientv3.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("connecting to etcd: %w", err)
	}
	return c, nil
}

// SaveOptions are the settings of kos-etcd-backup save.
type SaveOptions struct {
	Client ClientOptions
	// Dir receives the snapshots; Keep is how many of them stay.
	Dir  string
	Keep int
	// S3, when set, is s3://BUCKET/PREFIX/, which receives a copy of each
	// snapshot; S3Endpoint selects an S3-compatible store; S3Keep, when
	// more than 0, is how many stay there (else a lifecycle rule of the
	// bucket decides).
	S3         string
	S3Endpoint string
	S3Keep     int
	// Defrag defragments the members after saving, as DefragPolicy says.
	Defrag bool
	Policy DefragPolicy
	// Timeout bounds the whole run.
	Timeout time.Duration
}

func addPolicyFlags(fs *pflag.FlagSet, p *DefragPolicy) {
	fs.Int64Var(&p.MinFreeBytes, "defrag-min-free-bytes", 64<<20, "Defragment a member only when at least this many bytes of its database file are free.")
	fs.Float64Var(&p.MinFreeRatio, "defrag-min-free-ratio", 0.25, "Defragment a member only when at least this share (0 to 1) of its database file is free.")
}

func validatePolicy(p DefragPolicy) []error {
	var errs []error
	if p.MinFreeBytes < 0 {
		errs = append(errs, fmt.Errorf("--defrag-min-free-bytes is %d, want 0 or more", p.MinFreeBytes))
	}
	if p.MinFreeRatio < 0 || p.MinFreeRatio > 1 {
		errs = append(errs, fmt.Errorf("--defrag-min-free-ratio is %g, want 0 to 1", p.MinFreeRatio))
	}
	return errs
}

// Validate returns every problem with the settings at once.
func (o *SaveOptions) Validate() error {
	errs := o.Client.validate()
	if o.Dir == "" {
		errs = append(errs, errors.New("--dir is empty"))
	}
	if o.Keep < 1 {
		errs = append(errs, fmt.Errorf("--keep is %d, want 1 or more", o.Keep))
	}
	if o.S3 != "" {
		if _, _, err := ParseS3(o.S3); err != nil {
			errs = append(errs, fmt.Errorf("--s3: %w", err))
		}
	}
	if o.S3Keep < 0 {
		errs = append(errs, fmt.Errorf("--s3-keep is %d, want 0 (keep all) or more", o.S3Keep))
	}
	if o.Timeout <= 0 {
		errs = append(errs, fmt.Errorf("--timeout is %s, want more than 0", o.Timeout))
	}
	errs = append(errs, validatePolicy(o.Policy)...)
	return errors.Join(errs...)
}

// Run saves a snapshot, then uploads it, prunes and defragments as o says,
// printing one line per step to out. An error after the snapshot is saved
// is a partialError.
func (o *SaveOptions) Run(ctx context.Context, out io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	c, err := o.Client.client()
	if err != nil {
		return err
	}
	defer c.Close()
	var store *S3
	if o.S3 != "" {
		// Before the snapshot: a wrong AWS configuration is found at once.
		if store, err = NewS3(ctx, o.S3, o.S3Endpoint); err != nil {
			return err
		}
	}
	// Room for the new snapshot first, so that the folder never holds more
	// than --keep and a volume sized for them does not fill up; with
	// --keep 1 the old one stays until the new one is saved.
	var errs []error
	if o.Keep > 1 {
		removed, err := Prune(o.Dir, o.Keep-1)
		for _, r := range removed {
			fmt.Fprintf(out, "pruned %s\n", r)
		}
		errs = append(errs, err)
	}
	snap, err := Save(ctx, c, o.Dir, time.Now())
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	fmt.Fprintf(out, "saved %s (%d bytes, sha256 %s%s)\n", snap.Path, snap.Size, snap.SHA256, describe(snap))

	// Every later step runs even when one before it failed: a failed
	// upload is no reason to skip defragmenting.
	if store != nil {
		if loc, err := store.Upload(ctx, snap); err != nil {
			errs = append(errs, err)
		} else {
			fmt.Fprintf(out, "uploaded %s\n", loc)
			if o.S3Keep > 0 {
				removed, err := store.Prune(ctx, o.S3Keep)
				for _, r := range removed {
					fmt.Fprintf(out, "pruned %s\n", r)
				}
				errs = append(errs, err)
			}
		}
	}
	removed, err := Prune(o.Dir, o.Keep)
	for _, r := range removed {
		fmt.Fprintf(out, "pruned %s\n", r)
	}
	errs = append(errs, err)
	if o.Defrag {
		errs = append(errs, Defragment(ctx, c, o.Policy, func(m MemberDefrag) { fmt.Fprintln(out, m) }))
	}
	if err := errors.Join(errs...); err != nil {
		return partialError{fmt.Errorf("saved %s, but: %w", snap.Path, err)}
	}
	return nil
}

// describe adds what etcd said about a snapshot, when it said anything.
func describe(snap Snapshot) string {
	var s string
	if snap.Revision != 0 {
		s += fmt.Sprintf(", revision %d", snap.Revision)
	}
	if snap.Version != "" {
		s += ", etcd storage version " + snap.Version
	}
	return s
}

func newSaveCommand(out io.Writer) *cobra.Command {
	o := &SaveOptions{}
	cmd := &cobra.Command{
		Use:   "save",
		Short: "Save a snapshot of etcd into a folder, and to S3 when configured",
		Long: `save streams a snapshot from etcd into --dir as kos-etcd-<UTC time>.db, with
a sha256sum file beside it, written under a temporary name and renamed once
checked against the hash etcd appends. It keeps the newest --keep: the oldest
go before the new one is saved, so that the folder never holds more. With --s3
(or $KOS_ETCD_BACKUP_S3) it uploads both files there too, with the AWS
credentials of the environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
AWS_REGION) and S3_ENDPOINT for an S3-compatible store. With --defrag it then
defragments the members worth it, one at a time (see defrag).`,
		Example: `  # The CronJob of the kos-etcd addon:
  kos-etcd-backup save --dir /var/lib/kos-etcd-backup --keep 28 --defrag \
    --endpoints https://kos-etcd-0.kos-etcd.example-com.svc:2379 \
    --cacert ca.crt --cert tls.crt --key tls.key`,
		Args: cmdline.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.Validate(); err != nil {
				return cmdline.Usage(err)
			}
			return o.Run(cmd.Context(), out)
		},
	}
	fs := cmd.Flags()
	o.Client.addFlags(fs)
	fs.StringVar(&o.Dir, "dir", "", "Folder that receives the snapshots.")
	fs.IntVar(&o.Keep, "keep", 28, "How many snapshots to keep in --dir, the newest.")
	fs.StringVar(&o.S3, "s3", os.Getenv(S3Env), "s3://BUCKET/PREFIX/ that receives a copy of each snapshot; empty uploads none (default $"+S3Env+").")
	fs.StringVar(&o.S3Endpoint, "s3-endpoint", os.Getenv(S3EndpointEnv), "URL of an S3-compatible store, addressed path-style; empty means AWS (default $"+S3EndpointEnv+").")
	fs.IntVar(&o.S3Keep, "s3-keep", 0, "How many snapshots to keep under --s3, the newest; 0 keeps all (leave it to a lifecycle rule).")
	fs.BoolVar(&o.Defrag, "defrag", false, "Defragment the members worth it after saving.")
	addPolicyFlags(fs, &o.Policy)
	fs.DurationVar(&o.Timeout, "timeout", 30*time.Minute, "The longest the whole run may take.")
	return cmd
}

// DefragOptions are the settings of kos-etcd-backup defrag.
type DefragOptions struct {
	Client ClientOptions
	Policy DefragPolicy
	// DisarmNoSpace clears the NOSPACE alarms after defragmenting.
	DisarmNoSpace bool
	Timeout       time.Duration
}

func newDefragCommand(out io.Writer) *cobra.Command {
	o := &DefragOptions{}
	cmd := &cobra.Command{
		Use:   "defrag",
		Short: "Defragment the etcd members worth it, one at a time",
		Long: `defrag asks every member for the size of its database file and the part in
use, and defragments, one at a time and the leader last, each member where at
least --defrag-min-free-bytes and --defrag-min-free-ratio of the file is free;
it prints what it did or why not for each. A member blocks its clients while
it defragments, so when one member does not answer, none is defragmented. With
--disarm-nospace it then clears the NOSPACE alarms etcd raises at its quota.`,
		Args: cmdline.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			errs := append(o.Client.validate(), validatePolicy(o.Policy)...)
			if o.Timeout <= 0 {
				errs = append(errs, fmt.Errorf("--timeout is %s, want more than 0", o.Timeout))
			}
			if err := errors.Join(errs...); err != nil {
				return cmdline.Usage(err)
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), o.Timeout)
			defer cancel()
			c, err := o.Client.client()
			if err != nil {
				return err
			}
			defer c.Close()
			if err := Defragment(ctx, c, o.Policy, func(m MemberDefrag) { fmt.Fprintln(out, m) }); err != nil {
				return err
			}
			if !o.DisarmNoSpace {
				return nil
			}
			cleared, err := DisarmNoSpace(ctx, c)
			for _, id := range cleared {
				fmt.Fprintf(out, "disarmed the NOSPACE alarm of member %x\n", id)
			}
			if err == nil && len(cleared) == 0 {
				fmt.Fprintln(out, "no NOSPACE alarm to disarm")
			}
			return err
		},
	}
	fs := cmd.Flags()
	o.Client.addFlags(fs)
	addPolicyFlags(fs, &o.Policy)
	fs.BoolVar(&o.DisarmNoSpace, "disarm-nospace", false, "Then clear the NOSPACE alarms, which keep etcd refusing writes after its database reached the quota; do it once space is free again.")
	fs.DurationVar(&o.Timeout, "timeout", 30*time.Minute, "The longest the whole run may take.")
	return cmd
}

// RestoreCommandOptions are the settings of kos-etcd-backup restore.
type RestoreCommandOptions struct {
	RestoreOptions
	// From is a snapshot file, a folder (its newest snapshot), or
	// s3://BUCKET/PREFIX/ (its newest) or s3://BUCKET/PREFIX/NAME.db.
	From       string
	S3Endpoint string
	// WorkDir receives a snapshot downloaded from S3; empty means the
	// folder that holds DataDir.
	WorkDir string
	Timeout time.Duration
}

// Validate returns every problem with the settings at once.
func (o *RestoreCommandOptions) Validate() error {
	var errs []error
	if o.From == "" {
		errs = append(errs, errors.New("--from is empty"))
	} else if strings.HasPrefix(o.From, "s3:") {
		if _, _, err := ParseS3(o.From); err != nil {
			errs = append(errs, fmt.Errorf("--from: %w", err))
		}
	}
	if o.DataDir == "" {
		errs = append(errs, errors.New("--data-dir is empty"))
	}
	if o.Name == "" {
		errs = append(errs, errors.New("--name is empty"))
	}
	if o.InitialCluster == "" {
		errs = append(errs, errors.New("--initial-cluster is empty"))
	}
	if len(o.PeerURLs) == 0 {
		errs = append(errs, errors.New("--initial-advertise-peer-urls is empty"))
	}
	if o.Timeout <= 0 {
		errs = append(errs, fmt.Errorf("--timeout is %s, want more than 0", o.Timeout))
	}
	return errors.Join(errs...)
}

// Run finds the snapshot, downloading it when it is in S3, and restores it.
func (o *RestoreCommandOptions) Run(ctx context.Context, out io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	path, from, cleanup, err := o.fetch(ctx)
	if err != nil {
		return err
	}
	defer cleanup()
	ro := o.RestoreOptions
	ro.Snapshot = path
	r, err := Restore(ro, time.Now())
	if err != nil {
		return err
	}
	how := "checked against etcd's hash and its sidecar"
	if !r.Snapshot.Sidecar {
		how = "checked against etcd's hash; it had no sidecar"
	}
	fmt.Fprintf(out, "verified %s (%d bytes, sha256 %s): %s\n", from, r.Snapshot.Size, r.Snapshot.SHA256, how)
	if r.MovedAside != "" {
		fmt.Fprintf(out, "moved the old data aside to %s\n", r.MovedAside)
	}
	fmt.Fprintf(out, "restored member %s into %s\n", o.Name, o.DataDir)
	return nil
}

// fetch returns the local path of the snapshot --from names, where it came
// from, and what removes it again when it was downloaded.
func (o *RestoreCommandOptions) fetch(ctx context.Context) (path, from string, cleanup func(), err error) {
	nothing := func() {}
	if !strings.HasPrefix(o.From, "s3:") {
		info, err := os.Stat(o.From)
		if err != nil {
			return "", "", nothing, fmt.Errorf("--from: %w", err)
		}
		if !info.IsDir() {
			return o.From, o.From, nothing, nil
		}
		path, err := Newest(o.From)
		return path, path, nothing, err
	}
	bucket, key, _ := ParseS3(o.From)
	prefix, name := key, ""
	if IsName(filepath.Base(key)) {
		prefix, name = strings.TrimSuffix(key, filepath.Base(key)), filepath.Base(key)
	}
	store, err := NewS3(ctx, "s3://"+bucket+"/"+prefix, o.S3Endpoint)
	if err != nil {
		return "", "", nothing, err
	}
	workDir := o.WorkDir
	if workDir == "" {
		workDir = filepath.Dir(filepath.Clean(o.DataDir))
	}
	tmp, err := os.MkdirTemp(workDir, ".download-")
	if err != nil {
		return "", "", nothing, fmt.Errorf("making a folder for the download: %w", err)
	}
	cleanup = func() { os.RemoveAll(tmp) }
	path, err = store.Download(ctx, name, tmp)
	if err != nil {
		cleanup()
		return "", "", nothing, err
	}
	return path, store.URL(filepath.Base(path)), cleanup, nil
}

func newRestoreCommand(out io.Writer) *cobra.Command {
	o := &RestoreCommandOptions{}
	cmd := &cobra.Command{
		Use:   "restore",
		Short: "Make an etcd member's data folder from a snapshot",
		Long: `restore checks a snapshot (the hash etcd appended, and its sidecar when there
is one) and makes the data folder of one member from it; run it for every
member, with the same snapshot, --initial-cluster and --initial-cluster-token
and each member's own --name and --initial-advertise-peer-urls, while etcd is
stopped; then start the members. A snapshot that fails its check is refused
before anything is touched. A data folder that holds data is refused unless
--replace, which moves it aside. --from takes a snapshot file, a folder (its
newest snapshot), s3://BUCKET/PREFIX/ (its newest) or
s3://BUCKET/PREFIX/kos-etcd-<time>.db.`,
		Example: `  # Member kos-etcd-0 of the kos-etcd addon, from the newest snapshot of the backup volume:
  kos-etcd-backup restore --from /var/lib/kos-etcd-backup --data-dir /var/lib/etcd/data \
    --name kos-etcd-0 \
    --initial-advertise-peer-urls https://kos-etcd-0.kos-etcd.example-com.svc:2380 \
    --initial-cluster kos-etcd-0=https://kos-etcd-0.kos-etcd.example-com.svc:2380,kos-etcd-1=https://kos-etcd-1.kos-etcd.example-com.svc:2380,kos-etcd-2=https://kos-etcd-2.kos-etcd.example-com.svc:2380`,
		Args: cmdline.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.Validate(); err != nil {
				return cmdline.Usage(err)
			}
			return o.Run(cmd.Context(), out)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&o.From, "from", "", "Snapshot file, folder of snapshots, or s3:// location.")
	fs.StringVar(&o.S3Endpoint, "s3-endpoint", os.Getenv(S3EndpointEnv), "URL of an S3-compatible store, addressed path-style; empty means AWS (default $"+S3EndpointEnv+").")
	fs.StringVar(&o.WorkDir, "work-dir", "", "Folder for a snapshot downloaded from S3; empty means the folder that holds --data-dir.")
	fs.StringVar(&o.DataDir, "data-dir", "", "The member's --data-dir; not a mount point (the restored folder is renamed into place).")
	fs.StringVar(&o.Name, "name", "", "The member's --name.")
	fs.StringSliceVar(&o.PeerURLs, "initial-advertise-peer-urls", nil, "The member's --initial-advertise-peer-urls.")
	fs.StringVar(&o.InitialCluster, "initial-cluster", "", "The cluster's --initial-cluster: every member, name=peer URL, comma-separated.")
	fs.StringVar(&o.ClusterToken, "initial-cluster-token", "kos-etcd", "The cluster's --initial-cluster-token.")
	fs.Uint64Var(&o.RevisionBump, "bump-revision", 1_000_000_000, "Raise the revision by this much and mark the old ones compacted, so that watchers start over; 0 keeps it.")
	fs.BoolVar(&o.Replace, "replace", false, "Move a data folder that holds data aside instead of refusing.")
	fs.DurationVar(&o.Timeout, "timeout", 30*time.Minute, "The longest the whole run may take.")
	return cmd
}
