package main

import (
	"net/netip"
	"strings"

	"golang.org/x/net/dns/dnsmessage"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// records maps lowercase, fully qualified names (with the trailing dot) to
// their IPv4 addresses. A name present with no address exists but has no A
// record.
type records map[string][]netip.Addr

// buildRecords makes the records of the Services and EndpointSlices in the
// cluster domain: <svc>.<ns>.svc.<domain> is a Service's ClusterIP, or for
// a headless Service its endpoints' addresses, and
// <hostname>.<svc>.<ns>.svc.<domain> an endpoint with a hostname. Each name
// is also known without the domain, <svc>.<ns>.svc, as the stand-ins for
// search lists in tests write them.
func buildRecords(domain string, services []corev1.Service, slices []discoveryv1.EndpointSlice) records {
	domain = strings.Trim(strings.ToLower(domain), ".")
	r := records{}
	add := func(name string, addrs ...netip.Addr) {
		name = strings.ToLower(name)
		for _, full := range []string{name + "." + domain + ".", name + "."} {
			r[full] = append(r[full], addrs...)
		}
	}
	headless := map[string]bool{}
	notReady := map[string]bool{}
	for _, s := range services {
		name := s.Name + "." + s.Namespace + ".svc"
		notReady[name] = s.Spec.PublishNotReadyAddresses
		if s.Spec.ClusterIP == corev1.ClusterIPNone {
			headless[name] = true
			add(name)
			continue
		}
		var addrs []netip.Addr
		if a, err := netip.ParseAddr(s.Spec.ClusterIP); err == nil && a.Is4() {
			addrs = append(addrs, a)
		}
		add(name, addrs...)
	}
	for _, sl := range slices {
		svc := sl.Labels[discoveryv1.LabelServiceName]
		if svc == "" || sl.AddressType != discoveryv1.AddressTypeIPv4 {
			continue
		}
		name := svc + "." + sl.Namespace + ".svc"
		if _, known := notReady[name]; !known {
			continue
		}
		for _, ep := range sl.Endpoints {
			if ready := ep.Conditions.Ready == nil || *ep.Conditions.Ready; !ready && !notReady[name] {
				continue
			}
			var addrs []netip.Addr
			for _, a := range ep.Addresses {
				if ip, err := netip.ParseAddr(a); err == nil && ip.Is4() {
					addrs = append(addrs, ip)
				}
			}
			if headless[name] {
				add(name, addrs...)
			}
			if ep.Hostname != nil && *ep.Hostname != "" {
				add(*ep.Hostname+"."+name, addrs...)
			}
		}
	}
	return r
}

// maxAnswers bounds the A records of one answer, so that it fits a 512-byte
// UDP message without truncation.
const maxAnswers = 16

// answer builds the response to a query: the A records of a known name,
// no records (NOERROR) for other types of a known name, NXDOMAIN for any
// other name. It never forwards. ok is false for what is no query at all,
// which gets no response.
func (r records) answer(query []byte) (response []byte, ok bool) {
	var p dnsmessage.Parser
	hdr, err := p.Start(query)
	if err != nil || hdr.Response {
		return nil, false
	}
	q, err := p.Question()
	if err != nil {
		return nil, false
	}
	rh := dnsmessage.Header{ID: hdr.ID, Response: true, Authoritative: true, RecursionDesired: hdr.RecursionDesired}
	addrs, known := r[strings.ToLower(q.Name.String())]
	switch {
	case hdr.OpCode != 0:
		rh.RCode = dnsmessage.RCodeNotImplemented
	case !known:
		rh.RCode = dnsmessage.RCodeNameError
	}
	b := dnsmessage.NewBuilder(nil, rh)
	b.EnableCompression()
	if err := b.StartQuestions(); err != nil {
		return nil, false
	}
	if err := b.Question(q); err != nil {
		return nil, false
	}
	if err := b.StartAnswers(); err != nil {
		return nil, false
	}
	if rh.RCode == dnsmessage.RCodeSuccess && q.Type == dnsmessage.TypeA && q.Class == dnsmessage.ClassINET {
		for i, a := range addrs {
			if i == maxAnswers {
				break
			}
			h := dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 5}
			if err := b.AResource(h, dnsmessage.AResource{A: a.As4()}); err != nil {
				return nil, false
			}
		}
	}
	msg, err := b.Finish()
	if err != nil {
		return nil, false
	}
	return msg, true
}
