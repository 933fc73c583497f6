package redisbucket_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/redisbucket"
)

// TestReviewOutageErrorKeyBounded: a key is client data (MaxKeyBytes's doc:
// a client may send a megabyte in a header); the error a failed decision
// returns must not carry the whole of it.
func TestReviewOutageErrorKeyBounded(t *testing.T) {
	s := outageServer(t)
	c := outageClient(t, s, 2)
	l, err := redisbucket.New(c, 10, 1, redisbucket.WithTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	beginOutage(t, s, "kill")
	long := strings.Repeat("\x00", 1<<20)
	_, err = l.AllowN(context.Background(), long, 1)
	if !errors.Is(err, admit.ErrUnavailable) {
		t.Fatalf("outage: %v", err)
	}
	if len(err.Error()) > 4096 {
		t.Errorf("an outage's error for a %d-byte key is %d bytes", len(long), len(err.Error()))
	}
}
