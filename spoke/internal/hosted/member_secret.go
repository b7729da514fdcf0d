package hosted

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// parse reads a member Secret; every error names the key or annotation.
func (p *Provider) parse(secret *corev1.Secret) (*Member, string, error) {
	var errs []error
	name := secret.Name
	if v, ok := secret.Annotations[ClusterNameAnnotation]; ok {
		name = v
	}
	if msgs := validation.IsDNS1123Label(name); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("cluster name %q (annotation %s, default the Secret's name): %v", name, ClusterNameAnnotation, msgs))
	}
	webhookURL := p.opts.DefaultWebhookURL
	if v, ok := secret.Annotations[WebhookURLAnnotation]; ok {
		webhookURL = v
	}
	if webhookURL != "" {
		if u, err := url.Parse(webhookURL); err != nil || u.Scheme != "https" || u.Host == "" {
			errs = append(errs, fmt.Errorf("annotation %s %q: must be an absolute https URL", WebhookURLAnnotation, webhookURL))
		}
	}
	data := secret.Data[KubeconfigKey]
	var cfg *rest.Config
	if len(data) == 0 {
		errs = append(errs, fmt.Errorf("data[%s]: required, the member's kubeconfig", KubeconfigKey))
	} else {
		var err error
		if err = checkKubeconfig(data); err != nil {
			errs = append(errs, fmt.Errorf("data[%s] of Secret %s/%s: %w", KubeconfigKey, secret.Namespace, secret.Name, err))
		} else if cfg, err = clientcmd.RESTConfigFromKubeConfig(data); err != nil {
			errs = append(errs, fmt.Errorf("data[%s]: %w", KubeconfigKey, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, "", err
	}
	cfg.Timeout = p.opts.RequestTimeout
	sum := sha256.New()
	for _, part := range []string{name, webhookURL, string(secret.UID), string(data)} {
		sum.Write([]byte(part))
		sum.Write([]byte{0})
	}
	return &Member{
		Name:       name,
		Secret:     types.NamespacedName{Namespace: secret.Namespace, Name: secret.Name},
		SecretUID:  secret.UID,
		WebhookURL: webhookURL,
		Config:     cfg,
	}, hex.EncodeToString(sum.Sum(nil)), nil
}

// checkKubeconfig refuses a member kubeconfig that would make the agent run
// a program or read a file of its own pod: whoever may write Secrets in the
// kubeconfig namespace could otherwise have the agent run a binary (exec,
// auth-provider) or send its ServiceAccount token or certificates (a
// tokenFile or certificate path) to a server of theirs. Inline credentials
// (token, client-certificate-data, client-key-data,
// certificate-authority-data) are what a member kubeconfig carries.
func checkKubeconfig(data []byte) error {
	cfg, err := clientcmd.Load(data)
	if err != nil {
		return err
	}
	var errs []error
	refuse := func(field string, set bool) {
		if set {
			errs = append(errs, fmt.Errorf("%s: not allowed in a member kubeconfig (the agent would run a program or read a file of its own); use inline data", field))
		}
	}
	for name, user := range cfg.AuthInfos {
		if user == nil {
			continue
		}
		at := fmt.Sprintf("users[%s].user.", name)
		refuse(at+"exec", user.Exec != nil)
		refuse(at+"auth-provider", user.AuthProvider != nil)
		refuse(at+"tokenFile", user.TokenFile != "")
		refuse(at+"client-certificate", user.ClientCertificate != "")
		refuse(at+"client-key", user.ClientKey != "")
	}
	for name, c := range cfg.Clusters {
		if c == nil {
			continue
		}
		refuse(fmt.Sprintf("clusters[%s].cluster.certificate-authority", name), c.CertificateAuthority != "")
	}
	return errors.Join(errs...)
}
