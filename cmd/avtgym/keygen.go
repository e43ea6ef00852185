package main

import (
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"os"

	"avtgym/env"
)

// runKeygen writes a fresh episode-token key (64 hex digits) to a new file
// readable only by its owner.
func runKeygen(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) != 1 || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprintln(stderr, "usage: avtgym keygen FILE   (writes a new token key; share it between replicas)")
		return 2
	}
	f, err := os.OpenFile(args[0], os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		fmt.Fprintln(stderr, "keygen:", err)
		return 1
	}
	_, err = fmt.Fprintln(f, hex.EncodeToString(env.RandomKey()))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		fmt.Fprintln(stderr, "keygen:", err)
		return 1
	}
	fmt.Fprintf(stdout, "wrote %s; start replicas with --token-key-file %s\n", args[0], args[0])
	return 0
}
