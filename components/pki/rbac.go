package pki

import (
	rbacv1 "k8s.io/api/rbac/v1"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
)

// Rules returns the least RBAC that ensuring set needs: namespaced, the rules
// of a Role in the Secrets' namespace; cluster, when apiService is not "",
// those of a ClusterRole for its CA bundle. Creating cannot be limited to
// names (a create request has no name to authorize), so create covers every
// Secret of the namespace; reading and renewing are limited to the set's
// Secrets, and the CA Secret is only ever read.
func Rules(set Set, apiService string) (namespaced, cluster []rbacv1.PolicyRule, err error) {
	leaves, err := set.Leaves(DefaultNamespace)
	if err != nil {
		return nil, nil, err
	}
	names := []string{CASecret}
	var leafNames []string
	for _, l := range leaves {
		names = append(names, l.Secret)
		leafNames = append(leafNames, l.Secret)
	}
	namespaced = []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"create"}},
		{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}, ResourceNames: names},
		{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"update"}, ResourceNames: leafNames},
	}
	if apiService != "" {
		cluster = []rbacv1.PolicyRule{{
			APIGroups:     []string{apiregistrationv1.GroupName},
			Resources:     []string{"apiservices"},
			Verbs:         []string{"get", "patch"},
			ResourceNames: []string{apiService},
		}}
	}
	return namespaced, cluster, nil
}

// PublishRules returns the rules of a Role, in one namespace the signer
// publishes into, that let it publish there: the CA's ConfigMap when
// caConfigMap is set, and the password Secrets named. As in Rules, creating
// covers the namespace's every object of the kind; reading and updating are
// limited to the names, and a password Secret is never updated.
func PublishRules(caConfigMap bool, passwordSecrets ...string) []rbacv1.PolicyRule {
	var rules []rbacv1.PolicyRule
	if caConfigMap {
		rules = append(rules,
			rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"create"}},
			rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "update"}, ResourceNames: []string{CAConfigMap}},
		)
	}
	if len(passwordSecrets) > 0 {
		rules = append(rules,
			rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"create"}},
			rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}, ResourceNames: passwordSecrets},
		)
	}
	return rules
}
