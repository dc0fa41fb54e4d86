package certs

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"maps"
	"net"
	"net/http"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"draingate.dev/draingate/proving/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func servingCert(t *testing.T, data map[string][]byte) *x509.Certificate {
	t.Helper()
	c, _, err := parsePair(data[KeyCert], data[KeyKey])
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// verify checks the serving certificate against the bundle, as the API
// server would, at the given time.
func verify(t *testing.T, data map[string][]byte, name string, at time.Time) error {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data[KeyCACert]) {
		t.Fatal("no CA in the bundle")
	}
	_, err := servingCert(t, data).Verify(x509.VerifyOptions{Roots: pool, DNSName: name, CurrentTime: at})
	return err
}

func TestRenewLifecycle(t *testing.T) {
	now := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	c := &Certs{Namespace: "draingate-system", Service: "draingate", Now: func() time.Time { return now }}

	data, changed, err := c.renew(nil)
	if err != nil || !changed {
		t.Fatalf("first renew: changed %v, %v", changed, err)
	}
	for _, n := range c.DNSNames() {
		if err := verify(t, data, n, now); err != nil {
			t.Errorf("%s: %v", n, err)
		}
	}
	if again, changed, _ := c.renew(data); changed || !bytes.Equal(again[KeyCert], data[KeyCert]) {
		t.Errorf("a fresh certificate was renewed")
	}

	// Two thirds into the serving certificate's life: a new one, same CA.
	now = now.Add(certLifetime - certRenew + time.Hour)
	renewed, changed, _ := c.renew(data)
	if !changed || bytes.Equal(renewed[KeyCert], data[KeyCert]) || !bytes.Equal(renewed[KeyCACert], data[KeyCACert]) {
		t.Fatalf("serving certificate near expiry: changed %v, want a new certificate under the same CA", changed)
	}
	if err := verify(t, renewed, "draingate.draingate-system.svc", now); err != nil {
		t.Error(err)
	}

	// Less than a year left on the CA: a new CA, the bundle trusts both.
	old := renewed
	now = time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC).Add(caLifetime - caRenew + time.Hour)
	rotated, changed, _ := c.renew(old)
	if !changed || bytes.Equal(rotated[KeyCAKey], old[KeyCAKey]) {
		t.Fatalf("CA near expiry was kept")
	}
	if !bytes.Contains(rotated[KeyCACert], old[KeyCACert]) {
		t.Errorf("the new bundle dropped the old CA while it is still valid")
	}
	if err := verify(t, rotated, "draingate.draingate-system.svc", now); err != nil {
		t.Errorf("new certificate under the new bundle: %v", err)
	}

	// A Secret whose certificate names another Service is renewed.
	other := &Certs{Namespace: "draingate-system", Service: "gate", Now: c.Now}
	if _, changed, _ := other.renew(rotated); !changed {
		t.Errorf("a certificate for another Service name was kept")
	}
	// A serving key that is not the certificate's (a hand-edited Secret):
	// TLS would refuse the pair for good, so both are replaced.
	mismatched := maps.Clone(rotated)
	mismatched[KeyKey] = old[KeyKey]
	if fixed, changed, err := c.renew(mismatched); err != nil || !changed || bytes.Equal(fixed[KeyKey], old[KeyKey]) {
		t.Errorf("serving key of another certificate: changed %v, err %v; want a new pair", changed, err)
	} else if _, err := tls.X509KeyPair(fixed[KeyCert], fixed[KeyKey]); err != nil || verify(t, fixed, "draingate", now) != nil {
		t.Errorf("the new pair: %v", err)
	}
	// The same for the CA: a new CA, whose certificates verify.
	mismatched = maps.Clone(rotated)
	mismatched[KeyCAKey] = old[KeyKey]
	if fixed, changed, err := c.renew(mismatched); err != nil || !changed || bytes.Equal(fixed[KeyCAKey], old[KeyKey]) || verify(t, fixed, "draingate", now) != nil {
		t.Errorf("CA key of another certificate: changed %v, err %v; want a new CA", changed, err)
	}
	// Garbage in the Secret is replaced, not fatal.
	if fixed, changed, err := c.renew(map[string][]byte{KeyCert: []byte("junk"), KeyCACert: []byte("junk")}); err != nil || !changed || verify(t, fixed, "draingate", now) != nil {
		t.Errorf("garbage Secret: changed %v, err %v", changed, err)
	}
}

// TestSyncOnCluster: Sync writes the Secret, fills the caBundle of every
// webhook in the configuration, and a TLS server using GetCertificate is
// trusted through that caBundle; a second replica's Sync keeps what the
// first wrote.
func TestSyncOnCluster(t *testing.T) {
	cl := testenv.Get(t)
	ns := cl.Namespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	name := "draingate-certs-" + ns
	api := cl.Client.AdmissionregistrationV1().MutatingWebhookConfigurations()
	none := admissionv1.SideEffectClassNone
	hook := func(n string) admissionv1.MutatingWebhook {
		return admissionv1.MutatingWebhook{Name: n, SideEffects: &none, AdmissionReviewVersions: []string{"v1"},
			FailurePolicy: ptr.To(admissionv1.Ignore),
			// Matches nothing: the test only exercises the caBundle.
			ObjectSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"draingate.dev/never": "x"}},
			ClientConfig:   admissionv1.WebhookClientConfig{Service: &admissionv1.ServiceReference{Namespace: ns, Name: "draingate", Path: ptr.To("/mutate-pods")}}}
	}
	if _, err := api.Create(ctx, &admissionv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name},
		Webhooks: []admissionv1.MutatingWebhook{hook("a.draingate.dev"), hook("b.draingate.dev")}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer api.Delete(context.Background(), name, metav1.DeleteOptions{})

	c := &Certs{Client: cl.Client, Namespace: ns, SecretName: "webhook-tls", Service: "draingate", ConfigName: name}
	if err := c.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	cfg, err := api.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sec, err := cl.Client.CoreV1().Secrets(ns).Get(ctx, "webhook-tls", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range cfg.Webhooks {
		if !bytes.Equal(w.ClientConfig.CABundle, sec.Data[KeyCACert]) {
			t.Errorf("webhook %s caBundle differs from the Secret's ca.crt", w.Name)
		}
	}
	second := &Certs{Client: cl.Client, Namespace: ns, SecretName: "webhook-tls", Service: "draingate", ConfigName: name}
	if err := second.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	sec2, _ := cl.Client.CoreV1().Secrets(ns).Get(ctx, "webhook-tls", metav1.GetOptions{})
	if sec2.ResourceVersion != sec.ResourceVersion {
		t.Errorf("a second replica rewrote a valid Secret")
	}

	// A TLS server with the certificate, reached by its Service name.
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{GetCertificate: second.GetCertificate})
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok")) })}
	go srv.Serve(ln)
	defer srv.Close()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(cfg.Webhooks[0].ClientConfig.CABundle)
	client := &http.Client{Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "draingate." + ns + ".svc"},
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, ln.Addr().String())
		},
	}}
	resp, err := client.Get("https://draingate." + ns + ".svc/")
	if err != nil {
		t.Fatalf("TLS through the caBundle: %v", err)
	}
	resp.Body.Close()
}
