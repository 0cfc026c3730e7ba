package cni

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/textproto"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"
)

// SupportedVersions are the CNI spec versions kos-cni speaks. The agent
// answers in 1.0.0; the CNI library converts a result to 0.3.1 and 0.4.0
// (and a 0.4.0 prevResult back). The pod-network controller refuses a
// definition of another version before it makes any attachment.
var SupportedVersions = version.PluginSupports(Versions...)

// Versions are SupportedVersions, oldest first.
var Versions = []string{"0.3.1", "0.4.0", "1.0.0", "1.1.0"}

// about is what kos-cni prints when run without a CNI command.
const about = "kos-cni: attaches pods to KOS networks through the node's kos-agent"

// Main runs kos-cni: it carries out the CNI command its environment names
// and prints the result, or prints a CNI error and exits with status 1.
// Run as `kos-cni install <path>` it installs itself at path instead
// (Install).
func Main() {
	if len(os.Args) > 1 && os.Args[1] == InstallCommand {
		var dst string
		if len(os.Args) == 3 {
			dst = os.Args[2]
		}
		if err := installSelf(dst); err != nil {
			fmt.Fprintf(os.Stderr, "kos-cni: %v\n", err)
			os.Exit(1)
		}
		return
	}
	skel.PluginMainFuncs(skel.CNIFuncs{
		Add:    cmdAdd,
		Del:    cmdDel,
		Check:  cmdCheck,
		Status: cmdStatus,
		GC:     cmdGC,
	}, SupportedVersions, about)
}

func cmdAdd(args *skel.CmdArgs) error {
	conf, req, err := newRequest(CommandAdd, args)
	if err != nil {
		return err
	}
	body, err := send(conf.socket(), req, requestTimeout)
	if err != nil {
		return err
	}
	res, err := types100.NewResult(body)
	if err != nil {
		return types.NewError(types.ErrDecodingFailure, fmt.Sprintf("kos-agent sent a result that cannot be decoded: %v", err), "")
	}
	return types.PrintResult(res, conf.CNIVersion)
}

func cmdCheck(args *skel.CmdArgs) error {
	conf, req, err := newRequest(CommandCheck, args)
	if err != nil {
		return err
	}
	_, err = send(conf.socket(), req, requestTimeout)
	return err
}

// cmdDel forwards a DEL and succeeds when kos-agent cannot be reached or
// does not answer in time: the pod must be able to go. What is left (the
// veth pair goes with the network namespace) the agent cleans up.
func cmdDel(args *skel.CmdArgs) error {
	conf, req, err := newRequest(CommandDel, args)
	if err != nil {
		return err
	}
	_, err = send(conf.socket(), req, deleteTimeout)
	var down *agentDownError
	if errors.As(err, &down) {
		fmt.Fprintf(os.Stderr, "kos-cni: DEL of container %s interface %s succeeds without kos-agent: %v\n", args.ContainerID, args.IfName, err)
		return nil
	}
	return err
}

// cmdGC asks kos-agent to release what it plugged for the network and no
// valid attachment names (a sandbox gone without its DEL). It succeeds
// when the agent cannot be reached: an agent that restarts remembers no
// sandboxes, and sweeps the veths no attachment holds itself.
func cmdGC(args *skel.CmdArgs) error {
	conf, req, err := newRequest(CommandGC, args)
	if err != nil {
		return err
	}
	for _, a := range conf.ValidAttachments {
		req.Valid = append(req.Valid, Attachment{ContainerID: a.ContainerID, IfName: a.IfName})
	}
	_, err = send(conf.socket(), req, deleteTimeout)
	var down *agentDownError
	if errors.As(err, &down) {
		fmt.Fprintf(os.Stderr, "kos-cni: GC of network %s succeeds without kos-agent: %v\n", conf.Name, err)
		return nil
	}
	return err
}

// cmdStatus reports whether kos-agent answers, and is ready.
func cmdStatus(args *skel.CmdArgs) error {
	conf, req, err := newRequest(CommandStatus, args)
	if err != nil {
		return err
	}
	_, err = send(conf.socket(), req, deleteTimeout)
	var down *agentDownError
	if errors.As(err, &down) {
		return types.NewError(types.ErrPluginNotAvailable, err.Error(), "")
	}
	return err
}

// socket returns the path of kos-agent's socket: SocketEnv's, or
// DefaultSocket. The network configuration has no say.
func (c *NetConf) socket() string {
	if s := os.Getenv(SocketEnv); s != "" {
		return s
	}
	return DefaultSocket
}

// checkSocket refuses a network configuration whose "socket" is not where
// kos-cni reaches kos-agent: it would otherwise look as if it were obeyed.
func (c *NetConf) checkSocket() error {
	if c.Socket == "" || filepath.Clean(c.Socket) == filepath.Clean(c.socket()) {
		return nil
	}
	return types.NewError(types.ErrInvalidNetworkConfig,
		fmt.Sprintf("network configuration %q sets \"socket\" to %s: kos-cni reaches kos-agent only at %s, which the node's configuration sets, not the definition; remove \"socket\"", c.Name, c.Socket, c.socket()), "")
}

// newRequest decodes a CNI invocation into the request for kos-agent. It
// returns CNI errors that say what is wrong with the configuration or the
// environment. A DEL asks for nothing but what it needs to find what to
// remove.
func newRequest(command string, args *skel.CmdArgs) (*NetConf, *Request, error) {
	conf := &NetConf{}
	if err := json.Unmarshal(args.StdinData, conf); err != nil {
		return nil, nil, types.NewError(types.ErrDecodingFailure, fmt.Sprintf("decoding the network configuration: %v", err), "")
	}
	pod, ipArgs, macArg, err := parseArgs(args.Args)
	if err != nil {
		return nil, nil, err
	}
	prev, err := prevResult100(conf)
	if err != nil {
		return nil, nil, err
	}
	req := &Request{
		Command:     command,
		ContainerID: args.ContainerID,
		Netns:       args.Netns,
		IfName:      args.IfName,
		Pod:         pod,
		Network:     conf.Name,
		Subnet:      conf.Subnet,
		IPs:         append(append(append([]string(nil), conf.RuntimeConfig.IPs...), conf.Args.CNI.IPs...), ipArgs...),
		PrevResult:  prev,
		MAC:         conf.RuntimeConfig.MAC,
	}
	if req.MAC == "" {
		req.MAC = macArg
	}
	if command != CommandAdd && command != CommandCheck {
		return conf, req, nil
	}
	if err := conf.checkSocket(); err != nil {
		return nil, nil, err
	}
	if conf.Subnet == "" {
		return nil, nil, types.NewError(types.ErrInvalidNetworkConfig,
			fmt.Sprintf("network configuration %q names no subnet: set \"subnet\" to the name of a KOS Subnet in the pod's namespace", conf.Name), "")
	}
	if pod.Namespace == "" || pod.Name == "" {
		return nil, nil, types.NewError(types.ErrInvalidEnvironmentVariables,
			"CNI_ARGS names no pod (K8S_POD_NAMESPACE and K8S_POD_NAME): kos-cni attaches Kubernetes pods only", "")
	}
	return conf, req, nil
}

// prevResult100 returns a CHECK's prevResult as a CNI 1.x result, which is
// what the agent reads, whatever version the configuration has.
func prevResult100(conf *NetConf) (json.RawMessage, error) {
	if len(conf.PrevResult) == 0 {
		return nil, nil
	}
	if newer, err := version.GreaterThanOrEqualTo(conf.CNIVersion, "1.0.0"); err != nil || newer {
		// 1.x results are read as 1.0.0's (skel refused a malformed
		// version already).
		return conf.PrevResult, nil
	}
	prev, err := version.NewResult(conf.CNIVersion, conf.PrevResult)
	if err == nil {
		prev, err = prev.GetAsVersion(types100.ImplementedSpecVersion)
	}
	if err != nil {
		return nil, types.NewError(types.ErrDecodingFailure, fmt.Sprintf("decoding prevResult of CNI version %s: %v", conf.CNIVersion, err), "")
	}
	data, err := json.Marshal(prev)
	if err != nil {
		return nil, types.NewError(types.ErrInternal, fmt.Sprintf("encoding prevResult: %v", err), "")
	}
	return data, nil
}

// parseArgs reads the pod, the addresses asked for in IP and the MAC
// address asked for in MAC from CNI_ARGS (KEY=VALUE pairs separated by
// semicolons). Other keys are ignored.
func parseArgs(s string) (pod Pod, ips []string, mac string, err error) {
	if s == "" {
		return pod, nil, "", nil
	}
	for pair := range strings.SplitSeq(s, ";") {
		if pair == "" {
			continue
		}
		k, v, ok := strings.Cut(pair, "=")
		if !ok {
			return pod, nil, "", types.NewError(types.ErrInvalidEnvironmentVariables, fmt.Sprintf("CNI_ARGS: %q is not KEY=VALUE", pair), "")
		}
		switch k {
		case "K8S_POD_NAMESPACE":
			pod.Namespace = v
		case "K8S_POD_NAME":
			pod.Name = v
		case "K8S_POD_UID":
			pod.UID = v
		case "MAC":
			mac = v
		case "IP":
			for ip := range strings.SplitSeq(v, ",") {
				if ip != "" {
					ips = append(ips, ip)
				}
			}
		}
	}
	return pod, ips, mac, nil
}

// agentDownError says that kos-agent could not be reached, or did not
// answer in time.
type agentDownError struct {
	socket string
	err    error
}

func (e *agentDownError) Error() string {
	return fmt.Sprintf("kos-agent not reachable at %s: %v", e.socket, e.err)
}

func (e *agentDownError) Unwrap() error { return e.err }

// As makes the error a CNI error ("try again later") for errors.As, which
// is how skel finds the code to print.
func (e *agentDownError) As(target any) bool {
	if t, ok := target.(**types.Error); ok {
		*t = types.NewError(types.ErrTryAgainLater, e.Error(), "")
		return true
	}
	return false
}

// send sends req to the agent at socket and returns the body of its
// answer. An agent that cannot be reached or does not answer within
// timeout gives an agentDownError; an error the agent answers is returned as the CNI error it
// sent.
func send(socket string, req *Request, timeout time.Duration) ([]byte, error) {
	netns, err := openNetns(req.Netns)
	switch {
	case err == nil:
		defer netns.Close()
	case req.Command == CommandDel:
		// The namespace went first: the agent removes the rest.
		netns = nil
	case errors.Is(err, os.ErrNotExist):
		return nil, types.NewError(types.ErrInvalidEnvironmentVariables, fmt.Sprintf("CNI_NETNS %s: the network namespace does not exist", req.Netns), "")
	default:
		return nil, types.NewError(types.ErrInternal, fmt.Sprintf("opening the network namespace %s: %v", req.Netns, err), "")
	}
	body, err := json.Marshal(req)
	if err != nil {
		return nil, types.NewError(types.ErrInternal, fmt.Sprintf("encoding the request to kos-agent: %v", err), "")
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	conn, err := dialPassing(ctx, socket, netns)
	if err != nil {
		return nil, &agentDownError{socket: socket, err: err}
	}
	defer conn.Close()
	code, status, answer, err := exchange(ctx, conn, body)
	if err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			err = errors.New("no answer in time")
		}
		return nil, &agentDownError{socket: socket, err: err}
	}
	if code == 200 {
		return answer, nil
	}
	cniErr := &types.Error{}
	if err := json.Unmarshal(answer, cniErr); err != nil || cniErr.Msg == "" {
		return nil, types.NewError(types.ErrInternal, fmt.Sprintf("kos-agent answered %s: %s", status, strings.TrimSpace(string(answer))), "")
	}
	return nil, cniErr
}

// exchange posts body to the agent's RequestPath over conn as one HTTP/1.0
// request, and returns the answer's status code, its status line's code
// and text, and its body. HTTP/1.0 because its answer is unchunked and ends
// with the connection, so that reading it takes a status line, headers and
// the rest: the plugin runs once per pod interface change, and net/http's
// client, with the TLS stack it links in, made each run cost more CPU than
// its work (docs/benchmarks.md, CNI ADD under churn). The agent's server
// is net/http's.
func exchange(ctx context.Context, conn net.Conn, body []byte) (code int, status string, answer []byte, err error) {
	if deadline, ok := ctx.Deadline(); ok {
		if err := conn.SetDeadline(deadline); err != nil {
			return 0, "", nil, err
		}
	}
	req := fmt.Appendf(nil, "POST %s HTTP/1.0\r\nHost: kos-agent\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", RequestPath, len(body))
	// One write: the first carries the namespace's descriptor.
	if _, err := conn.Write(append(req, body...)); err != nil {
		return 0, "", nil, fmt.Errorf("sending the request: %w", err)
	}
	r := textproto.NewReader(bufio.NewReader(conn))
	line, err := r.ReadLine()
	if err != nil {
		return 0, "", nil, fmt.Errorf("reading the answer: %w", err)
	}
	proto, status, _ := strings.Cut(line, " ")
	codeText, _, _ := strings.Cut(status, " ")
	if code, err = strconv.Atoi(codeText); err != nil || !strings.HasPrefix(proto, "HTTP/1.") {
		return 0, "", nil, fmt.Errorf("reading the answer: not an HTTP status line: %q", line)
	}
	header, err := r.ReadMIMEHeader()
	if err != nil {
		return 0, "", nil, fmt.Errorf("reading the answer's header: %w", err)
	}
	if answer, err = io.ReadAll(r.R); err != nil {
		return 0, "", nil, fmt.Errorf("reading the answer: %w", err)
	}
	if n := header.Get("Content-Length"); n != "" && n != strconv.Itoa(len(answer)) {
		return 0, "", nil, fmt.Errorf("reading the answer: %d bytes of %s", len(answer), n)
	}
	return code, status, answer, nil
}
