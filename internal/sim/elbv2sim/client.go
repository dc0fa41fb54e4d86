package elbv2sim

import (
	"net/http"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2"
)

// Client returns a real AWS SDK client for the API this Server serves (the
// first address it listens on): region us-east-1, static credentials (the
// emulator checks no signature), an HTTP client that never uses a proxy
// (the emulator is local, whatever the environment says), and the SDK's
// default retryer (3 attempts with backoff, as against AWS). optFns adjust
// the options, e.g. RetryMaxAttempts or a retryer without backoff. Close
// closes the idle connections of every client handed out. Client panics if
// the Server is not listening: call Listen first.
func (s *Server) Client(optFns ...func(*elasticloadbalancingv2.Options)) *elasticloadbalancingv2.Client {
	tr := &http.Transport{Proxy: nil}
	s.mu.Lock()
	if len(s.urls) == 0 {
		s.mu.Unlock()
		panic("elbv2sim: Client before Listen")
	}
	url := s.urls[0]
	s.clientTransports = append(s.clientTransports, tr)
	s.mu.Unlock()
	o := elasticloadbalancingv2.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(url),
		Credentials:  credentials.NewStaticCredentialsProvider("AKIDELBV2SIM", "elbv2sim-secret", ""),
		HTTPClient:   &http.Client{Transport: tr},
	}
	for _, fn := range optFns {
		fn(&o)
	}
	return elasticloadbalancingv2.New(o)
}
