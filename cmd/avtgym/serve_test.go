package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"testing"
	"time"

	"avtgym/client"
	pb "avtgym/proto/avtgym/v1"
)

// TestServeJSONLogs: with --log-format json every line serve writes is a
// JSON object with a level, a time and a message; each call has an access
// line (method, code, duration, principal), failed ones too; the drain is
// logged; and serve exits 0 when its context ends.
func TestServeJSONLogs(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"serve", "--listen", "127.0.0.1:0", "--metrics-listen", "", "--log-format", "json"}, io.Discard, pw)
		pw.Close()
	}()
	lines := make(chan string, 1024)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var all []map[string]any
	parse := func(line string) map[string]any {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("a log line is not JSON: %v\n%s", err, line)
		}
		for _, k := range []string{"level", "ts", "msg"} {
			if _, ok := m[k]; !ok {
				t.Fatalf("a log line lacks %q: %s", k, line)
			}
		}
		all = append(all, m)
		return m
	}
	addr := ""
	timeout := time.After(time.Minute)
	for addr == "" {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatalf("serve exited before serving (exit %d)", <-done)
			}
			if m := parse(line); m["msg"] == "serving" {
				addr, _ = m["addr"].(string)
			}
		case <-timeout:
			t.Fatal("serve did not log its address within a minute")
		}
	}
	c, err := client.Dial(addr, client.Options{NoEnv: true, Attempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Env.ListCorpora(ctx, &pb.ListCorporaRequest{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Env.Step(ctx, &pb.StepRequest{Token: []byte("not a token")}); err == nil {
		t.Fatal("a bad token was accepted")
	}
	c.Close()
	cancel()
	for line := range lines {
		parse(line)
	}
	if code := <-done; code != 0 {
		t.Fatalf("serve exited %d", code)
	}
	access := map[string]map[string]any{}
	msgs := map[string]bool{}
	for _, m := range all {
		msgs[m["msg"].(string)] = true
		if m["msg"] == "rpc" {
			access[m["method"].(string)] = m
		}
	}
	for method, code := range map[string]string{"/avtgym.v1.EnvService/ListCorpora": "OK", "/avtgym.v1.EnvService/Step": "InvalidArgument"} {
		a := access[method]
		if a == nil || a["code"] != code || a["level"] != "info" || a["took"] == nil || a["principal"] == nil || a["peer"] == nil {
			t.Errorf("access line of %s: %v, want code %s with took, principal and peer", method, a, code)
		}
	}
	for _, want := range []string{"draining", "stopped"} {
		if !msgs[want] {
			t.Errorf("no %q line; messages: %v", want, msgs)
		}
	}
}
