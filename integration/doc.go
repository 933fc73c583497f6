// Package integration holds the tests that join modules no user need join:
// admitgrpc's interceptors and admitotel's wrappers over redisbucket on a
// real redis-server, and admithttp over redisbucket where a test needs both
// beside the others. It is a module of its own, which nothing imports, so
// that admitgrpc's and admitotel's go.mod files do not require redisbucket:
// a user of either resolves neither redisbucket nor go-redis for their
// tests. The package has no API; `make test` runs its tests.
package integration
