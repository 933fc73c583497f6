package main

import (
	"net/http"

	"github.com/admit-go/admit/rls/settings"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// metrics is the service's rls.Observer and its /metrics handler.
type metrics struct{}

func newMetrics(s *settings.Settings) (*metrics, error) { return &metrics{}, nil }

func (m *metrics) close()                                                       {}
func (m *metrics) configLoad(ok bool)                                           {}
func (m *metrics) handler() http.Handler                                        { return http.NotFoundHandler() }
func (m *metrics) Decided(domain string, code pb.RateLimitResponse_Code, n int) {}
func (m *metrics) StoreFailed(domain string, err error)                         {}
