// Package bench compares the admit buckets and pool with the libraries Go
// services use today. It is its own module so that peers and plotting never
// enter the core module's dependency graph.
package bench
