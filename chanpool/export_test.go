package chanpool

// LifetimeJitter exposes the lifetime jitter to the black-box tests, so that
// the model in FuzzPool can predict expiry to the nanosecond.
var LifetimeJitter = lifetimeJitter
