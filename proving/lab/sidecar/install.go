package sidecar

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"sync"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

const (
	// ConfigName names the MutatingWebhookConfiguration. The API server
	// calls mutating webhooks one configuration after the other, sorted by
	// name (its webhook configuration manager sorts them; see
	// docs/facts.md), and a mesh's injector runs after draingate's.
	// draingate's chart names its configuration after the release's full
	// name ("draingate", or in the lab "lab-<n>-draingate-sys-<id>"), so
	// "zz-" puts this one after it for any release name that does not
	// itself start with "zz".
	ConfigName = "zz-draingate-lab-sidecar"
	// WebhookName is the webhook's name in it (a qualified name, as the API
	// requires).
	WebhookName = "sidecar.lab.draingate.dev"
	// Path is where the server answers AdmissionReviews.
	Path = "/mutate"

	// readyBy bounds Install's wait for the API server to call the webhook.
	readyBy = 60 * time.Second
	// cleanupBy bounds each API call of the cleanup.
	cleanupBy = 30 * time.Second
	// certLifetime covers any lab run; the CA lives in memory only.
	certLifetime = 30 * 24 * time.Hour
)

// Install serves the sidecar webhook (NewHandler) over HTTPS on
// listenIP:<a free port>, where the API server must reach it (in the lab,
// the bridge's address on the host, testenv.HostIP), with a CA generated in
// memory for this run, and registers it with the API server as the
// MutatingWebhookConfiguration ConfigName: pod CREATE in namespaces
// labelled Label=Enabled, failurePolicy Fail (a lab pod never runs without
// the sidecar because the lab's server did not answer), sideEffects None,
// reinvocationPolicy Never, AdmissionReview v1. A configuration of that name
// left by an earlier run that died is taken over.
//
// Install returns once the API server calls the webhook: it labels a
// throwaway namespace and creates dry-run pods in it until one comes back
// with the sidecar, then deletes the namespace.
//
// uninstall deletes the configuration (and the throwaway namespace if its
// deletion failed) and stops the server; it tries every step whatever
// failed before and returns all errors joined. It is never nil and may be
// called more than once: the caller defers it at once, error or not, and
// calls it with a context that outlives Ctrl-C (context.Background()); each
// API call is bounded anyway. When Install fails it has already cleaned up
// what it made, and uninstall has nothing left to do.
func Install(ctx context.Context, cl kubernetes.Interface, listenIP string, opts Options) (uninstall func(context.Context) error, err error) {
	in := &installation{cl: cl}
	uninstall = in.uninstall
	if opts.Image == "" {
		return uninstall, errors.New("sidecar: Options.Image is required")
	}
	ip := net.ParseIP(listenIP)
	if ip == nil {
		return uninstall, fmt.Errorf("sidecar: listen address %q is no IP address", listenIP)
	}
	defer func() {
		if err != nil {
			if cerr := in.uninstall(context.WithoutCancel(ctx)); cerr != nil {
				err = fmt.Errorf("%w (and cleaning up: %v)", err, cerr)
			}
		}
	}()

	caPEM, cert, err := selfSigned(ip, time.Now())
	if err != nil {
		return uninstall, fmt.Errorf("sidecar: certificates: %w", err)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(listenIP, "0"))
	if err != nil {
		return uninstall, fmt.Errorf("sidecar: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle(Path, NewHandler(opts))
	in.srv = &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
	}
	in.served = make(chan struct{})
	go func() {
		defer close(in.served)
		in.srv.Serve(tls.NewListener(ln, in.srv.TLSConfig))
	}()

	url := fmt.Sprintf("https://%s%s", ln.Addr(), Path)
	uid, err := apply(ctx, cl, configuration(url, caPEM))
	if err != nil {
		return uninstall, fmt.Errorf("sidecar: webhook configuration %s: %w", ConfigName, err)
	}
	in.mu.Lock()
	in.made, in.uid = true, uid
	in.mu.Unlock()
	if err := in.waitCalled(ctx, opts); err != nil {
		return uninstall, err
	}
	return uninstall, nil
}

// configuration is the MutatingWebhookConfiguration for the server at url.
func configuration(url string, caPEM []byte) *admissionregistrationv1.MutatingWebhookConfiguration {
	return &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: ConfigName},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:         WebhookName,
			ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: caPEM},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule: admissionregistrationv1.Rule{
					APIGroups:   []string{""},
					APIVersions: []string{"v1"},
					Resources:   []string{"pods"},
					Scope:       ptr.To(admissionregistrationv1.NamespacedScope),
				},
			}},
			NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{Label: Enabled}},
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			ReinvocationPolicy:      ptr.To(admissionregistrationv1.NeverReinvocationPolicy),
			AdmissionReviewVersions: []string{"v1"},
			TimeoutSeconds:          ptr.To[int32](10),
		}},
	}
}

// apply creates want, or replaces the configuration of that name an earlier
// run left behind (which would point at a server long gone and, failing
// closed, block every pod in a labelled namespace). It returns the UID.
func apply(ctx context.Context, cl kubernetes.Interface, want *admissionregistrationv1.MutatingWebhookConfiguration) (types.UID, error) {
	api := cl.AdmissionregistrationV1().MutatingWebhookConfigurations()
	got, err := api.Create(ctx, want, metav1.CreateOptions{})
	if err == nil {
		return got.UID, nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return "", err
	}
	old, err := api.Get(ctx, want.Name, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	want.ResourceVersion, want.UID = old.ResourceVersion, old.UID
	got, err = api.Update(ctx, want, metav1.UpdateOptions{})
	if err != nil {
		return "", err
	}
	return got.UID, nil
}

// installation is what Install made, for uninstall.
type installation struct {
	cl     kubernetes.Interface
	srv    *http.Server
	served chan struct{}

	mu      sync.Mutex
	made    bool      // the configuration is to delete
	uid     types.UID // its UID
	probeNS string    // a throwaway namespace still to delete
}

func (in *installation) uninstall(ctx context.Context) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	var errs []error
	if in.made {
		cctx, cancel := context.WithTimeout(ctx, cleanupBy)
		var del metav1.DeleteOptions
		if in.uid != "" {
			// Leaves alone a configuration another run has made since.
			del.Preconditions = &metav1.Preconditions{UID: &in.uid}
		}
		err := in.cl.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(cctx, ConfigName, del)
		cancel()
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("deleting webhook configuration %s: %w", ConfigName, err))
		} else {
			in.made = false
		}
	}
	if in.probeNS != "" {
		if err := in.deleteNamespace(ctx, in.probeNS); err != nil {
			errs = append(errs, err)
		} else {
			in.probeNS = ""
		}
	}
	if in.srv != nil {
		cctx, cancel := context.WithTimeout(ctx, cleanupBy)
		if err := in.srv.Shutdown(cctx); err != nil {
			in.srv.Close()
		}
		cancel()
		<-in.served
		in.srv = nil
	}
	return errors.Join(errs...)
}

func (in *installation) deleteNamespace(ctx context.Context, ns string) error {
	ctx, cancel := context.WithTimeout(ctx, cleanupBy)
	defer cancel()
	err := in.cl.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting namespace %s: %w", ns, err)
	}
	return nil
}

// waitCalled returns once a dry-run pod in a labelled namespace comes back
// with the sidecar: the API server has picked the configuration up (it
// watches configurations, so a pod created right after Create may still
// miss the webhook) and reaches the server.
func (in *installation) waitCalled(ctx context.Context, opts Options) error {
	suffix := make([]byte, 4)
	rand.Read(suffix)
	ns := "draingate-lab-sidecar-probe-" + hex.EncodeToString(suffix)
	nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{Label: Enabled}}}
	if _, err := in.cl.CoreV1().Namespaces().Create(ctx, nsObj, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("sidecar: probe namespace: %w", err)
	}
	in.mu.Lock()
	in.probeNS = ns
	in.mu.Unlock()

	o := opts.withDefaults()
	probe := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "sidecar-probe-", Namespace: ns},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name:  o.AppContainer,
			Image: o.Image,
			Ports: []corev1.ContainerPort{{Name: TrafficPort, ContainerPort: 8080}},
		}}},
	}
	wctx, cancel := context.WithTimeout(ctx, readyBy)
	defer cancel()
	var last error
	for {
		// The namespace's default ServiceAccount, which admission looks
		// up, may take a moment: that is one more reason to retry.
		p, err := in.cl.CoreV1().Pods(ns).Create(wctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		switch {
		case err != nil:
			last = err
		case p.Annotations[Annotation] == Injected:
			if err := in.deleteNamespace(context.WithoutCancel(ctx), ns); err != nil {
				return fmt.Errorf("sidecar: %w", err)
			}
			in.mu.Lock()
			in.probeNS = ""
			in.mu.Unlock()
			return nil
		default:
			last = errors.New("a dry-run pod came back without the sidecar")
		}
		select {
		case <-wctx.Done():
			return fmt.Errorf("sidecar: the API server does not call the webhook for pods in namespace %s: %v", ns, last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// selfSigned makes a CA and a serving certificate for ip signed by it, and
// returns the CA in PEM (the configuration's caBundle) and the serving pair.
func selfSigned(ip net.IP, now time.Time) (caPEM []byte, serving tls.Certificate, err error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, serving, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "draingate lab sidecar webhook CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(certLifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, serving, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, serving, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, serving, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: ip.String()},
		IPAddresses:  []net.IP{ip},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(certLifetime),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, serving, err
	}
	serving = tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), serving, nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand does not fail
	}
	return n
}
