// Package certs keeps the admission webhook's TLS in order without
// cert-manager: a self-managed CA and serving certificate in a Secret, the
// CA bundle kept current in the MutatingWebhookConfiguration, both rotated
// well before they expire. Every replica of `draingate serve` runs the same
// loop; the Secret is the one source of truth, so replicas converge on
// whichever certificate was written first (optimistic concurrency on the
// Secret's resourceVersion).
package certs

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Secret keys. ca.crt may hold the previous CA after the current one, so
// that the bundle trusts both during a CA rotation.
const (
	KeyCACert = "ca.crt"
	KeyCAKey  = "ca.key"
	KeyCert   = "tls.crt"
	KeyKey    = "tls.key"
)

// Lifetimes: the CA lives 5 years and is replaced when less than a year is
// left; the serving certificate lives a year and is replaced when less than
// a third of that is left. The loop checks every CheckEvery.
const (
	caLifetime   = 5 * 365 * 24 * time.Hour
	caRenew      = 365 * 24 * time.Hour
	certLifetime = 365 * 24 * time.Hour
	certRenew    = certLifetime / 3
	backdate     = time.Hour // clocks skew
)

// Certs keeps the webhook's certificate. Create it with its fields set,
// call Sync once before serving, then Run in the background.
type Certs struct {
	Client kubernetes.Interface
	// Namespace and SecretName name the Secret holding the CA and the
	// serving certificate.
	Namespace, SecretName string
	// Service is the webhook's Service name in Namespace: the certificate
	// covers its DNS names.
	Service string
	// ConfigName is the MutatingWebhookConfiguration whose webhooks'
	// caBundle is kept equal to the Secret's ca.crt. Empty: not managed
	// (cert-manager's CA injector or the operator does it).
	ConfigName string
	// External is true when something else (cert-manager) writes the
	// Secret and the caBundle: Sync only reads the Secret.
	External bool
	// CheckEvery is how often Run looks again (default 10 minutes).
	CheckEvery time.Duration
	Log        *slog.Logger
	Now        func() time.Time

	current atomic.Pointer[tls.Certificate]
	synced  atomic.Bool
}

// GetCertificate is for tls.Config: the current serving certificate.
func (c *Certs) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	if cert := c.current.Load(); cert != nil {
		return cert, nil
	}
	return nil, errors.New("the webhook has no serving certificate yet")
}

// Ready reports whether a Sync has succeeded: a serving certificate is
// loaded and (unless External) the caBundle trusts it. Until then the API
// server cannot call the webhook, so the server does not report ready.
func (c *Certs) Ready() bool { return c.synced.Load() }

// Run calls Sync every CheckEvery until ctx ends; failures are logged and
// retried at the next check (the old certificate serves meanwhile).
func (c *Certs) Run(ctx context.Context) {
	every := c.CheckEvery
	if every <= 0 {
		every = 10 * time.Minute
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := c.Sync(ctx); err != nil {
			c.log().Error("webhook certificate check failed; the current certificate keeps serving", "err", err)
		}
	}
}

func (c *Certs) log() *slog.Logger {
	if c.Log != nil {
		return c.Log
	}
	return slog.Default()
}

func (c *Certs) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

// Sync makes the Secret hold a valid CA and serving certificate (creating
// or renewing them as needed), loads the certificate for serving, and puts
// the CA bundle into the webhook configuration.
func (c *Certs) Sync(ctx context.Context) error {
	for attempt := 0; ; attempt++ {
		err := c.syncOnce(ctx)
		if err == nil {
			c.synced.Store(true)
		}
		if err == nil || attempt == 3 || !(apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err)) {
			return err
		}
		// Another replica wrote the Secret first: read theirs.
	}
}

func (c *Certs) syncOnce(ctx context.Context) error {
	secrets := c.Client.CoreV1().Secrets(c.Namespace)
	sec, err := secrets.Get(ctx, c.SecretName, metav1.GetOptions{})
	exists := err == nil
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("read Secret %s/%s: %w", c.Namespace, c.SecretName, err)
	}
	if c.External {
		if !exists {
			return fmt.Errorf("Secret %s/%s does not exist yet (cert-manager writes it)", c.Namespace, c.SecretName)
		}
		cert, err := tls.X509KeyPair(sec.Data[KeyCert], sec.Data[KeyKey])
		if err != nil {
			return fmt.Errorf("Secret %s/%s: %w", c.Namespace, c.SecretName, err)
		}
		c.current.Store(&cert)
		return nil
	}
	if !exists {
		sec = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: c.SecretName, Namespace: c.Namespace,
			Labels: map[string]string{"app.kubernetes.io/managed-by": "draingate"}}, Type: corev1.SecretTypeOpaque}
	}
	data, changed, err := c.renew(sec.Data)
	if err != nil {
		return err
	}
	if changed {
		sec.Data = data
		if exists {
			_, err = secrets.Update(ctx, sec, metav1.UpdateOptions{})
		} else {
			_, err = secrets.Create(ctx, sec, metav1.CreateOptions{})
		}
		if err != nil {
			return err
		}
		c.log().Info("webhook certificate written", "secret", c.Namespace+"/"+c.SecretName)
	}
	cert, err := tls.X509KeyPair(data[KeyCert], data[KeyKey])
	if err != nil {
		return fmt.Errorf("Secret %s/%s: %w", c.Namespace, c.SecretName, err)
	}
	// Serve the new certificate only once the caBundle trusts it: a
	// certificate the API server cannot verify is no better than none, and
	// the one loaded before (if any) may still be trusted.
	if err := c.syncBundle(ctx, data[KeyCACert]); err != nil {
		if c.current.Load() == nil {
			c.current.Store(&cert)
		}
		return err
	}
	c.current.Store(&cert)
	return nil
}

// syncBundle sets every webhook's caBundle in the configuration to bundle.
func (c *Certs) syncBundle(ctx context.Context, bundle []byte) error {
	if c.ConfigName == "" {
		return nil
	}
	api := c.Client.AdmissionregistrationV1().MutatingWebhookConfigurations()
	cfg, err := api.Get(ctx, c.ConfigName, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("read MutatingWebhookConfiguration %s: %w", c.ConfigName, err)
	}
	changed := false
	for i := range cfg.Webhooks {
		if !bytes.Equal(cfg.Webhooks[i].ClientConfig.CABundle, bundle) {
			cfg.Webhooks[i].ClientConfig.CABundle = bundle
			changed = true
		}
	}
	if !changed {
		return nil
	}
	if _, err := api.Update(ctx, cfg, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("update the caBundle of MutatingWebhookConfiguration %s: %w", c.ConfigName, err)
	}
	c.log().Info("webhook caBundle updated", "config", c.ConfigName)
	return nil
}

// renew returns the Secret data with a CA and serving certificate valid for
// long enough, and whether it changed anything.
func (c *Certs) renew(data map[string][]byte) (map[string][]byte, bool, error) {
	now := c.now()
	out := map[string][]byte{}
	for k, v := range data {
		out[k] = v
	}
	changed := false
	caCert, caKey, err := parsePair(out[KeyCACert], out[KeyCAKey])
	if err != nil || caCert.NotAfter.Sub(now) < caRenew {
		prev := out[KeyCACert]
		newCert, newKey, err := newCA(now)
		if err != nil {
			return nil, false, err
		}
		caCert, caKey = newCert, newKey
		out[KeyCAKey] = encodeKey(newKey)
		// Trust the new CA first and the old one while it lasts: API servers
		// that still hold the old serving certificate keep working.
		bundle := encodeCert(caCert)
		if old, _, perr := parsePair(prev, nil); perr == nil && old.NotAfter.After(now) {
			bundle = append(bundle, encodeCert(old)...)
		}
		out[KeyCACert] = bundle
		delete(out, KeyCert) // a new CA needs a new serving certificate
		changed = true
	}
	cert, _, err := parsePair(out[KeyCert], out[KeyKey])
	if err != nil || cert.NotAfter.Sub(now) < certRenew || cert.CheckSignatureFrom(caCert) != nil || !c.covers(cert) {
		certPEM, keyPEM, err := c.newServing(now, caCert, caKey)
		if err != nil {
			return nil, false, err
		}
		out[KeyCert], out[KeyKey] = certPEM, keyPEM
		changed = true
	}
	return out, changed, nil
}

// DNSNames are the names the API server may use for the webhook's Service.
func (c *Certs) DNSNames() []string {
	s, ns := c.Service, c.Namespace
	return []string{s, s + "." + ns, s + "." + ns + ".svc", s + "." + ns + ".svc.cluster.local"}
}

func (c *Certs) covers(cert *x509.Certificate) bool {
	for _, n := range c.DNSNames() {
		if cert.VerifyHostname(n) != nil {
			return false
		}
	}
	return true
}
