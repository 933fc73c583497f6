package main

import (
	"context"
	"fmt"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/rls"
	"github.com/admit-go/admit/rls/settings"
)

func newRedisStore(ctx context.Context, s *settings.Settings) (rls.Store, func(), error) {
	return nil, nil, fmt.Errorf("%w: BACKEND_TYPE=redis is not built yet", admit.ErrInvalidConfig)
}
