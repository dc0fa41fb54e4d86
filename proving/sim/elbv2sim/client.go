package elbv2sim

import (
	"net/http"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
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
	url, tr := s.clientEndpoint()
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

// EC2Client is Client's counterpart for EC2: a real SDK ec2 client for
// the same address, for DescribeNetworkInterfaces, the one EC2 action the
// emulator answers.
func (s *Server) EC2Client(optFns ...func(*ec2.Options)) *ec2.Client {
	url, tr := s.clientEndpoint()
	o := ec2.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(url),
		Credentials:  credentials.NewStaticCredentialsProvider("AKIDELBV2SIM", "elbv2sim-secret", ""),
		HTTPClient:   &http.Client{Transport: tr},
	}
	for _, fn := range optFns {
		fn(&o)
	}
	return ec2.New(o)
}

// clientEndpoint is the first URL Listen answered and a new transport
// for a client of it, closed by Close.
func (s *Server) clientEndpoint() (string, *http.Transport) {
	tr := &http.Transport{Proxy: nil}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.urls) == 0 {
		panic("elbv2sim: Client before Listen")
	}
	s.clientTransports = append(s.clientTransports, tr)
	return s.urls[0], tr
}
