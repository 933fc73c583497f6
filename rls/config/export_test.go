package config

// SetTestHookRead sets the hook readFiles calls after each file it reads.
func SetTestHookRead(f func(path string)) { testHookRead = f }
