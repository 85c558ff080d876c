package main

import (
	"errors"
	"fmt"
	"os"
	"strings"
)

// secretFlags are flags that once took a secret on the command line, where
// every user of the machine can read it (ps, /proc/PID/cmdline). Each is
// refused, with how to pass the secret instead.
var secretFlags = map[string]string{
	"redis-password":          "--redis-password-file FILE or $RATELIMITD_REDIS_PASSWORD",
	"redis-sentinel-password": "--redis-sentinel-password-file FILE or $RATELIMITD_REDIS_SENTINEL_PASSWORD",
}

// refuseSecretArgs returns an error naming the first argument that puts a
// secret on the command line (-name, --name, -name=x or --name=x for a name
// of secretFlags), before any flag is parsed, so that the value itself is
// never echoed in an error. Arguments after a lone "--" are not flags.
func refuseSecretArgs(args []string) error {
	for _, a := range args {
		if a == "--" {
			return nil
		}
		if !strings.HasPrefix(a, "-") {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if instead, ok := secretFlags[name]; ok {
			return fmt.Errorf("--%s: a secret on the command line is visible to every user of the machine (ps, /proc); pass it by %s", name, instead)
		}
	}
	return nil
}

// readSecretFile returns the secret in the file at path: its contents
// without a trailing line break ("\n" or "\r\n"). An empty secret is an
// error, so that an empty file is not taken for no password.
func readSecretFile(flagName, path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("--%s: %w", flagName, err)
	}
	s := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
	if s == "" {
		return "", fmt.Errorf("--%s: %s is empty", flagName, path)
	}
	return s, nil
}

// secret returns the secret from the file named by a --*-file flag, or from
// the environment variable env; "" when neither is set. Both set is an
// error: one of them would be ignored silently.
func secret(flagName, path, env string) (string, error) {
	fromEnv, inEnv := os.LookupEnv(env)
	switch {
	case path != "" && inEnv && fromEnv != "":
		return "", errors.New("--" + flagName + " and $" + env + " are both set: use one")
	case path != "":
		return readSecretFile(flagName, path)
	}
	return fromEnv, nil
}
