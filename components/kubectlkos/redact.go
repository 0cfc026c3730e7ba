package kubectlkos

import (
	"regexp"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// redacted replaces what redaction removes.
const redacted = "REDACTED"

// secretPatterns find what a log line may hold that must not leave the
// cluster in a support bundle: credentials in headers, tokens, keys. Each
// replacement keeps what says what was there.
var secretPatterns = []struct {
	re   *regexp.Regexp
	repl string
}{
	// PEM private keys, whole.
	{regexp.MustCompile(`(?s)-----BEGIN ([A-Z ]*)PRIVATE KEY-----.*?-----END [A-Z ]*PRIVATE KEY-----`), "-----BEGIN ${1}PRIVATE KEY----- " + redacted + " -----END ${1}PRIVATE KEY-----"},
	// Authorization headers and bearer tokens.
	{regexp.MustCompile(`(?i)\b(bearer|basic)(\s+)[A-Za-z0-9._~+/=-]{8,}`), "${1}${2}" + redacted},
	// JSON Web Tokens, such as ServiceAccount tokens, wherever they are.
	{regexp.MustCompile(`\beyJ[A-Za-z0-9_-]{4,}\.eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*`), redacted},
	// key=value and "key": "value" where the key names a secret.
	{regexp.MustCompile(`(?i)((?:[a-z0-9]+[_-])*(?:token|password|passwd|secret|apikey|api[_-]key|access[_-]key(?:[_-]id)?|secret[_-]access[_-]key|credentials?)"?\s*[:=]\s*"?)([^\s"',&;}]+)`), "${1}" + redacted},
	// AWS access key IDs.
	{regexp.MustCompile(`\b(?:AKIA|ASIA)[0-9A-Z]{16}\b`), redacted},
}

// redactText returns text with every secret secretPatterns finds
// replaced.
func redactText(text []byte) []byte {
	for _, p := range secretPatterns {
		text = p.re.ReplaceAll(text, []byte(p.repl))
	}
	return text
}

// redactObject removes from an object what a support bundle must not
// carry: a Secret's values (its keys stay, to show what it holds), the
// values of containers' environment variables (their names and references
// stay), and the last-applied annotation, which repeats the object as it
// was applied. Managed fields go too, as noise.
func redactObject(obj *unstructured.Unstructured) {
	obj.SetManagedFields(nil)
	if ann := obj.GetAnnotations(); ann != nil {
		delete(ann, "kubectl.kubernetes.io/last-applied-configuration")
		if len(ann) == 0 {
			ann = nil
		}
		obj.SetAnnotations(ann)
	}
	if obj.GetKind() == "Secret" {
		for _, field := range []string{"data", "stringData"} {
			values, ok := obj.Object[field].(map[string]any)
			if !ok {
				continue
			}
			for k := range values {
				values[k] = redacted
			}
		}
	}
	for _, path := range [][]string{{"spec"}, {"spec", "template", "spec"}, {"spec", "jobTemplate", "spec", "template", "spec"}} {
		spec, ok, _ := unstructured.NestedMap(obj.Object, path...)
		if !ok {
			continue
		}
		changed := false
		for _, list := range []string{"containers", "initContainers", "ephemeralContainers"} {
			containers, ok := spec[list].([]any)
			if !ok {
				continue
			}
			for _, c := range containers {
				cm, ok := c.(map[string]any)
				if !ok {
					continue
				}
				env, ok := cm["env"].([]any)
				if !ok {
					continue
				}
				for _, e := range env {
					if em, ok := e.(map[string]any); ok {
						if _, has := em["value"]; has {
							em["value"] = redacted
							changed = true
						}
					}
				}
			}
		}
		if changed {
			_ = unstructured.SetNestedMap(obj.Object, spec, path...)
		}
	}
}
