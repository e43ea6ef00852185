package llm

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
)

// Cache stores responses by key (see Client.Chat for what the key covers).
// Implementations are safe for concurrent use and keep the first response
// stored under a key: a later Put of the same key changes nothing.
type Cache interface {
	// Get returns the response stored under key.
	Get(key string) (Response, bool)
	// Put stores r under key unless a response is already stored there.
	Put(key string, r Response) error
}

// MemoryCache is a Cache in memory.
type MemoryCache struct {
	mu sync.RWMutex
	m  map[string]Response
}

// NewMemoryCache returns an empty MemoryCache.
func NewMemoryCache() *MemoryCache {
	return &MemoryCache{m: map[string]Response{}}
}

// Get returns the response stored under key.
func (c *MemoryCache) Get(key string) (Response, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	r, ok := c.m[key]
	return r, ok
}

// Put stores r under key unless a response is already stored there.
func (c *MemoryCache) Put(key string, r Response) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[key]; !ok {
		r.Cached = false
		c.m[key] = r
	}
	return nil
}

// Len returns the number of responses stored.
func (c *MemoryCache) Len() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.m)
}

// FileCache is a Cache persisted to an append-only JSONL file, one
// {"key": ..., "response": {...}} object a line. The whole file is loaded at
// open; each Put appends one line with a single write, so a crash loses at
// most the line being written (the OS buffers the write; Close syncs it).
type FileCache struct {
	path string
	mu   sync.RWMutex
	m    map[string]Response
	f    *os.File // nil after Close
}

type fileEntry struct {
	Key      string   `json:"key"`
	Response Response `json:"response"`
}

// ErrCacheClosed is returned by Put on a closed FileCache.
var ErrCacheClosed = errors.New("llm: cache is closed")

// OpenFileCache opens (creating if needed) the cache file at path and loads
// it. A last line without its newline that does not parse (a write cut short
// by a crash) is dropped and cut from the file; any other line that does not
// parse is an error naming the line.
func OpenFileCache(path string) (*FileCache, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("llm: opening cache: %w", err)
	}
	c := &FileCache{path: path, m: map[string]Response{}, f: f}
	if err := c.load(); err != nil {
		f.Close()
		return nil, err
	}
	return c, nil
}

func (c *FileCache) load() error {
	data, err := io.ReadAll(c.f)
	if err != nil {
		return fmt.Errorf("llm: reading cache %s: %w", c.path, err)
	}
	good := 0 // bytes of complete, valid lines
	for line := 1; good < len(data); line++ {
		rest := data[good:]
		n := bytes.IndexByte(rest, '\n')
		complete := n >= 0
		if !complete {
			n = len(rest)
		}
		text := bytes.TrimSpace(rest[:n])
		if len(text) > 0 {
			var e fileEntry
			err := json.Unmarshal(text, &e)
			if err == nil && e.Key == "" {
				err = errors.New("missing key")
			}
			if err != nil {
				if !complete {
					// A write cut short: drop it so that the next append
					// starts on a line of its own.
					if err := c.f.Truncate(int64(good)); err != nil {
						return fmt.Errorf("llm: cache %s: cutting the truncated last line %d: %w", c.path, line, err)
					}
					break
				}
				return fmt.Errorf("llm: cache %s: line %d is corrupt: %w", c.path, line, err)
			}
			if _, ok := c.m[e.Key]; !ok {
				c.m[e.Key] = e.Response
			}
		}
		if !complete {
			// A valid last line without its newline: complete it.
			if _, err := c.f.WriteAt([]byte("\n"), int64(len(data))); err != nil {
				return fmt.Errorf("llm: cache %s: %w", c.path, err)
			}
			break
		}
		good += n + 1
	}
	if _, err := c.f.Seek(0, io.SeekEnd); err != nil {
		return fmt.Errorf("llm: cache %s: %w", c.path, err)
	}
	return nil
}

// Get returns the response stored under key.
func (c *FileCache) Get(key string) (Response, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	r, ok := c.m[key]
	return r, ok
}

// Put stores r under key, appending it to the file, unless a response is
// already stored there.
func (c *FileCache) Put(key string, r Response) error {
	if key == "" {
		return errors.New("llm: empty cache key")
	}
	r.Cached = false
	line, err := json.Marshal(fileEntry{Key: key, Response: r})
	if err != nil {
		return fmt.Errorf("llm: encoding cache entry: %w", err)
	}
	line = append(line, '\n')
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.f == nil {
		return ErrCacheClosed
	}
	if _, ok := c.m[key]; ok {
		return nil
	}
	if _, err := c.f.Write(line); err != nil {
		return fmt.Errorf("llm: writing cache %s: %w", c.path, err)
	}
	c.m[key] = r
	return nil
}

// Len returns the number of responses stored.
func (c *FileCache) Len() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.m)
}

// Close syncs and closes the file. Get keeps working; Put fails.
func (c *FileCache) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.f == nil {
		return nil
	}
	err := c.f.Sync()
	if cerr := c.f.Close(); err == nil {
		err = cerr
	}
	c.f = nil
	return err
}
