package apicheck

import (
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
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
// addons both channels pick on each server: each declares the namespace
// example-com alike, with PodSecurity restricted enforced, and a pod of every
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
				// kOps's channels applies addons in no fixed order: each
				// control addon declares the namespace, and alike, so that
				// whichever comes last leaves the same PodSecurity.
				if len(nsObjects) != len(controlAddons) {
					t.Fatalf("%d releases declare namespace %s, want all %d control addons (kOps's channels may apply any of them first)", len(nsObjects), namespace, len(controlAddons))
				}
				for _, o := range nsObjects[1:] {
					if diff := cmp.Diff(podSecurityLabels(nsObjects[0]), podSecurityLabels(o)); diff != "" {
						t.Errorf("the control addons declare namespace %s with different PodSecurity labels (-%s +%s):\n%s", namespace, nsObjects[0].GetLabels()[addonLabel], o.GetLabels()[addonLabel], diff)
					}
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

// addonLabel names the addon an object belongs to.
const addonLabel = "addon.kos.example.com/name"

// podSecurityLabels returns the PodSecurity labels of a namespace.
func podSecurityLabels(ns *unstructured.Unstructured) map[string]string {
	out := map[string]string{}
	for k, v := range ns.GetLabels() {
		if strings.HasPrefix(k, "pod-security.kubernetes.io/") {
			out[k] = v
		}
	}
	return out
}
