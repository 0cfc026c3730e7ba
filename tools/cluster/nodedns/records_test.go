package main

import (
	"net/netip"
	"slices"
	"testing"

	"golang.org/x/net/dns/dnsmessage"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func service(ns, name, clusterIP string, notReady bool) corev1.Service {
	return corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       corev1.ServiceSpec{ClusterIP: clusterIP, PublishNotReadyAddresses: notReady},
	}
}

type endpoint struct {
	hostname string
	addr     string
	ready    bool
}

func slice(ns, svc string, eps ...endpoint) discoveryv1.EndpointSlice {
	s := discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: svc + "-x", Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: discoveryv1.AddressTypeIPv4,
	}
	for _, e := range eps {
		ep := discoveryv1.Endpoint{Addresses: []string{e.addr}, Conditions: discoveryv1.EndpointConditions{Ready: &e.ready}}
		if e.hostname != "" {
			ep.Hostname = &e.hostname
		}
		s.Endpoints = append(s.Endpoints, ep)
	}
	return s
}

func query(t *testing.T, name string, typ dnsmessage.Type) []byte {
	t.Helper()
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: 4242, RecursionDesired: true})
	if err := b.StartQuestions(); err != nil {
		t.Fatal(err)
	}
	if err := b.Question(dnsmessage.Question{Name: dnsmessage.MustNewName(name), Type: typ, Class: dnsmessage.ClassINET}); err != nil {
		t.Fatal(err)
	}
	msg, err := b.Finish()
	if err != nil {
		t.Fatal(err)
	}
	return msg
}

func TestAnswer(t *testing.T) {
	r := buildRecords("cluster.local", []corev1.Service{
		service("default", "kubernetes", "10.96.0.1", false),
		service("kos-system", "kos-apiserver", "10.96.12.34", false),
		service("kos-system", "etcd", corev1.ClusterIPNone, false),
		service("kos-system", "starting", corev1.ClusterIPNone, true),
		service("other", "external", "", false),
	}, []discoveryv1.EndpointSlice{
		slice("kos-system", "kos-apiserver", endpoint{addr: "10.244.0.9", ready: true}),
		slice("kos-system", "etcd",
			endpoint{hostname: "etcd-0", addr: "10.244.0.5", ready: true},
			endpoint{hostname: "etcd-1", addr: "10.244.0.6", ready: true},
			endpoint{hostname: "etcd-2", addr: "10.244.0.7", ready: false}),
		slice("kos-system", "starting", endpoint{hostname: "s-0", addr: "10.244.0.8", ready: false}),
		slice("kos-system", "gone", endpoint{hostname: "g-0", addr: "10.244.0.10", ready: true}),
	})
	for _, tc := range []struct {
		name  string
		typ   dnsmessage.Type
		rcode dnsmessage.RCode
		want  []string
	}{
		{name: "kubernetes.default.svc.cluster.local.", typ: dnsmessage.TypeA, want: []string{"10.96.0.1"}},
		{name: "KUBERNETES.Default.svc.Cluster.Local.", typ: dnsmessage.TypeA, want: []string{"10.96.0.1"}},
		{name: "kubernetes.default.svc.", typ: dnsmessage.TypeA, want: []string{"10.96.0.1"}},
		{name: "kubernetes.default.svc.cluster.local.", typ: dnsmessage.TypeAAAA},
		{name: "kos-apiserver.kos-system.svc.cluster.local.", typ: dnsmessage.TypeA, want: []string{"10.96.12.34"}},
		{name: "etcd.kos-system.svc.cluster.local.", typ: dnsmessage.TypeA, want: []string{"10.244.0.5", "10.244.0.6"}},
		{name: "etcd-0.etcd.kos-system.svc.cluster.local.", typ: dnsmessage.TypeA, want: []string{"10.244.0.5"}},
		{name: "etcd-1.etcd.kos-system.svc.", typ: dnsmessage.TypeA, want: []string{"10.244.0.6"}},
		{name: "etcd-2.etcd.kos-system.svc.cluster.local.", typ: dnsmessage.TypeA, rcode: dnsmessage.RCodeNameError},
		{name: "s-0.starting.kos-system.svc.cluster.local.", typ: dnsmessage.TypeA, want: []string{"10.244.0.8"}},
		{name: "starting.kos-system.svc.cluster.local.", typ: dnsmessage.TypeA, want: []string{"10.244.0.8"}},
		{name: "external.other.svc.cluster.local.", typ: dnsmessage.TypeA},
		{name: "g-0.gone.kos-system.svc.cluster.local.", typ: dnsmessage.TypeA, rcode: dnsmessage.RCodeNameError},
		{name: "kubernetes.default.svc.cluster.local.kos-system.svc.cluster.local.", typ: dnsmessage.TypeA, rcode: dnsmessage.RCodeNameError},
		{name: "kubernetes.default.", typ: dnsmessage.TypeA, rcode: dnsmessage.RCodeNameError},
		{name: "cluster.local.", typ: dnsmessage.TypeA, rcode: dnsmessage.RCodeNameError},
		{name: "example.com.", typ: dnsmessage.TypeA, rcode: dnsmessage.RCodeNameError},
		{name: "nope.default.svc.cluster.local.", typ: dnsmessage.TypeA, rcode: dnsmessage.RCodeNameError},
	} {
		t.Run(tc.name+"/"+tc.typ.String(), func(t *testing.T) {
			msg, ok := r.answer(query(t, tc.name, tc.typ))
			if !ok {
				t.Fatal("no response")
			}
			var p dnsmessage.Parser
			hdr, err := p.Start(msg)
			if err != nil {
				t.Fatal(err)
			}
			if hdr.ID != 4242 || !hdr.Response || !hdr.Authoritative || hdr.RCode != tc.rcode {
				t.Fatalf("header %+v, want ID 4242, an authoritative response with RCODE %v", hdr, tc.rcode)
			}
			q, err := p.Question()
			if err != nil {
				t.Fatal(err)
			}
			if q.Name.String() != tc.name || q.Type != tc.typ {
				t.Fatalf("question %v, want %s %v", q, tc.name, tc.typ)
			}
			if err := p.SkipAllQuestions(); err != nil {
				t.Fatal(err)
			}
			answers, err := p.AllAnswers()
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, a := range answers {
				ar, isA := a.Body.(*dnsmessage.AResource)
				if !isA {
					t.Fatalf("answer %v is no A record", a)
				}
				got = append(got, netip.AddrFrom4(ar.A).String())
			}
			slices.Sort(got)
			if !slices.Equal(got, tc.want) {
				t.Fatalf("answers %v, want %v", got, tc.want)
			}
		})
	}
}

func TestAnswerIgnoresNonQueries(t *testing.T) {
	r := records{}
	if _, ok := r.answer([]byte{1, 2, 3}); ok {
		t.Fatal("answered garbage")
	}
	resp, ok := r.answer(query(t, "example.com.", dnsmessage.TypeA))
	if !ok {
		t.Fatal("no response to a query")
	}
	if _, ok := r.answer(resp); ok {
		t.Fatal("answered a response")
	}
}
