package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// minimalRecord is a schema-valid episode record (rollout's spelling).
const minimalRecord = `{"schema":"avtgym.episode/1","writer":"rollout","corpus":"demo","task_id":"t1","avt_id":"a1","seed":0,"group_index":0,"status":"TERMINATED","counted":0,"questions":[],"replies":[],"credited_terms":[],"reward":1,"precision":null,"recall":null,"f1":null,"success":1,"turns":[{"role":"environment","kind":"request","text":"hi"},{"role":"policy","kind":"stop","text":""}]}`

func TestViewFlags(t *testing.T) {
	if code, _, stderr := runCmd(t, "view"); code != 2 || !strings.Contains(stderr, "usage: avtgym view") {
		t.Errorf("view without a PATH: exit %d, stderr %q; want 2 with the usage", code, stderr)
	}
	for _, addr := range []string{"0.0.0.0:8090", ":8090", "192.0.2.1:8090"} {
		code, _, stderr := runCmd(t, "view", "--listen", addr, "no-such-file.jsonl")
		if code != 2 || !strings.Contains(stderr, "not a loopback address") || !strings.Contains(stderr, "--insecure-listen-any") || !strings.Contains(stderr, "privileged") {
			t.Errorf("--listen %s: exit %d, stderr %q; want 2 saying why and naming --insecure-listen-any", addr, code, stderr)
		}
	}
	if code, _, _ := runCmd(t, "view", "-h"); code != 0 {
		t.Errorf("view -h: exit %d", code)
	}
	bad := filepath.Join(t.TempDir(), "bad.jsonl")
	os.WriteFile(bad, []byte(minimalRecord+"\n{\"schema\":\"avtgym.episode/1\"}\n"), 0o644)
	if code, _, stderr := runCmd(t, "view", "--listen", "127.0.0.1:0", bad); code != 1 || !strings.Contains(stderr, "bad.jsonl:2:") {
		t.Errorf("a bad record: exit %d, stderr %q; want 1 naming bad.jsonl:2", code, stderr)
	}
}

// lockedBuffer is a bytes.Buffer the command writes while the test reads.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func TestViewServesUntilCancelled(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rollout.jsonl")
	os.WriteFile(path, []byte(minimalRecord+"\n"), 0o644)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr lockedBuffer
	done := make(chan int, 1)
	go func() { done <- run(ctx, []string{"view", "--listen", "127.0.0.1:0", path}, &stdout, &stderr) }()
	urlRE := regexp.MustCompile(`http://127\.0\.0\.1:\d+/`)
	var url string
	for deadline := time.Now().Add(20 * time.Second); url == "" && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		url = urlRE.FindString(stdout.String())
		select {
		case code := <-done:
			t.Fatalf("view exited %d early: %s", code, stderr.String())
		default:
		}
	}
	if url == "" {
		t.Fatalf("no URL printed; stdout %q stderr %q", stdout.String(), stderr.String())
	}
	resp, err := http.Get(url + "runs/rollout/episodes/1")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "t1") {
		t.Errorf("episode page: status %d\n%.300s", resp.StatusCode, body)
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("view exited %d after the context ended: %s", code, stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("view did not stop when its context ended")
	}
}
