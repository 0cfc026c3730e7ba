package apicheck

import (
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"

	"github.com/kos-sdn/kos/channels"
)

// restrictedCheck is the namespace TestIntegrationPodSecurity dry-runs the
// control components' pods in, labelled as the bundle labels theirs.
const restrictedCheck = "kos-restricted-check"

// controlAddons are the addons of the namespace example-com; the agent has
// its own from 0.2.0 on (kos-node, PodSecurity privileged).
var controlAddons = map[string]bool{"kos-etcd": true, "kos-apiserver": true, "kos-controller-manager": true}

// TestIntegrationPodSecurity checks the newest releases of the control
// addons both channels pick on each server: exactly one declares the namespace
// example-com, with PodSecurity restricted enforced, and a pod of every
// workload in that namespace (etcd, kos-apiserver, kos-pki,
// kos-controller-manager) passes restricted without a warning. The pods are
// dry-run in a namespace of their own labelled like example-com, since the
// other tests leave example-com as older releases label it.
func TestIntegrationPodSecurity(t *testing.T) {
	servers := testServers(t)
	ctx := context.Background()
	fetcher := channels.NewFetcher()
	var bootstrap, local []*channels.Addon
	for _, c := range []struct {
		into  *[]*channels.Addon
		files []string
	}{{&bootstrap, []string{"bootstrap-channel.yaml"}}, {&local, []string{"addons/local-channel.yaml", "bootstrap-channel.yaml"}}} {
		for _, f := range c.files {
			loaded, err := channels.Load(ctx, fetcher, filepath.Join(repoRoot, f))
			if err != nil {
				t.Fatalf("loading %s: %v", f, err)
			}
			*c.into = append(*c.into, loaded...)
		}
	}
	for _, s := range servers {
		for name, releases := range map[string][]*channels.Addon{"bootstrap": bootstrap, "local": local} {
			t.Run(s.String()+"/"+name, func(t *testing.T) {
				var nsObjects, pods, accounts []*unstructured.Unstructured
				for _, a := range channels.Select(releases, s.version) {
					if !controlAddons[a.Name] {
						continue
					}
					data, err := fetcher.FetchManifest(ctx, a)
					if err != nil {
						t.Fatal(err)
					}
					objs, err := channels.DecodeObjects(data)
					if err != nil {
						t.Fatal(err)
					}
					for _, u := range objs {
						switch {
						case u.GetKind() == "Namespace" && u.GetName() == namespace:
							nsObjects = append(nsObjects, u)
						case u.GetNamespace() != namespace:
						case u.GetKind() == "ServiceAccount":
							accounts = append(accounts, u)
						default:
							pods = append(pods, podsOf(t, u)...)
						}
					}
				}
				if len(nsObjects) != 1 {
					t.Fatalf("%d releases declare namespace %s, want exactly one (so that applying the others never rewrites its labels)", len(nsObjects), namespace)
				}
				labels := nsObjects[0].GetLabels()
				if labels["pod-security.kubernetes.io/enforce"] != "restricted" {
					t.Errorf("namespace %s enforces PodSecurity %q, want restricted", namespace, labels["pod-security.kubernetes.io/enforce"])
				}
				if len(pods) < 4 {
					t.Errorf("%d workloads in %s, want etcd, kos-apiserver, kos-pki and kos-controller-manager", len(pods), namespace)
				}

				var mu sync.Mutex
				var warnings []string
				cfg := rest.CopyConfig(s.env.RESTConfig)
				cfg.WarningHandler = warningFunc(func(code int, agent, text string) {
					mu.Lock()
					defer mu.Unlock()
					warnings = append(warnings, text)
				})
				client, err := channels.NewClient(cfg)
				if err != nil {
					t.Fatal(err)
				}
				check := nsObjects[0].DeepCopy()
				check.SetName(restrictedCheck)
				if err := apply(ctx, client, check, false); err != nil {
					t.Fatal(err)
				}
				for _, sa := range accounts {
					sa = sa.DeepCopy()
					sa.SetNamespace(restrictedCheck)
					if err := apply(ctx, client, sa, false); err != nil {
						t.Fatal(err)
					}
				}
				for _, pod := range pods {
					pod = pod.DeepCopy()
					pod.SetNamespace(restrictedCheck)
					mu.Lock()
					warnings = nil
					mu.Unlock()
					if err := apply(ctx, client, pod, true); err != nil {
						t.Errorf("%s: %v", describeObject(pod), err)
						continue
					}
					mu.Lock()
					if len(warnings) > 0 {
						t.Errorf("%s: Kubernetes %s warned: %s", describeObject(pod), s, strings.Join(warnings, "; "))
					}
					mu.Unlock()
				}
			})
		}
	}
}
