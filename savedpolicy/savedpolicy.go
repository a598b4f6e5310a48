package savedpolicy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/nexuspdp/nexus/bundle"
)

// Name is the saved policy's file name in the data directory.
const Name = "admin-policy.bundle"

// format names the file's layout in its header.
const format = "nexus-admin-policy/1"

// maxHeader bounds the header line.
const maxHeader = 4096

// header is the file's first line.
type header struct {
	Format   string    `json:"format"`
	Revision string    `json:"revision"`
	Size     int64     `json:"size"`
	SHA256   string    `json:"sha256"`
	SavedAt  time.Time `json:"saved_at"`
}

// DamagedError says the saved policy file cannot be trusted.
type DamagedError struct {
	Path string
	Err  error
}

func (e *DamagedError) Error() string {
	return fmt.Sprintf("the saved admin policy %s is damaged: %v (restore it, or remove it to start without it)", e.Path, e.Err)
}

func (e *DamagedError) Unwrap() error { return e.Err }

// File is the saved policy at Path. Its methods may be called from many
// goroutines; saves are serialised.
type File struct {
	Path string
	mu   sync.Mutex
}

// Saved is a policy read back from its file.
type Saved struct {
	Bundle  *bundle.Bundle
	Raw     []byte
	SavedAt time.Time
}

// Save makes raw (a bundle of the given revision) the saved policy,
// around load, which puts it in force: the bundle is written and synced
// to a temporary file first; when load fails the file is removed and the
// saved policy is unchanged; when it succeeds the file replaces the saved
// one. An error after load succeeded says so: the policy is in force but
// would not survive a restart.
func (f *File) Save(ctx context.Context, raw []byte, revision string, load func() error) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return err
	}
	dir := filepath.Dir(f.Path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(f.Path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("saving the policy: %w", err)
	}
	defer os.Remove(tmp.Name()) // a no-op once renamed
	sum := sha256.Sum256(raw)
	h, err := json.Marshal(header{Format: format, Revision: revision, Size: int64(len(raw)), SHA256: hex.EncodeToString(sum[:]), SavedAt: time.Now().UTC()})
	if err != nil {
		_ = tmp.Close()
		return err
	}
	w := bufio.NewWriter(tmp)
	_, _ = w.Write(h)
	_ = w.WriteByte('\n')
	_, _ = w.Write(raw)
	err = w.Flush()
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("saving the policy: %w", err)
	}
	if err := load(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), f.Path); err != nil {
		return fmt.Errorf("the policy is in force but was not saved, a restart would lose it: %w", err)
	}
	if err := syncDir(dir); err != nil {
		return fmt.Errorf("the policy is in force but its file may not survive a crash: %w", err)
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// Read returns the saved policy, nil when there is none, or a
// *DamagedError when the file does not check out.
func (f *File) Read() (*Saved, error) {
	b, err := os.ReadFile(f.Path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the saved admin policy: %w", err)
	}
	damaged := func(format string, args ...any) (*Saved, error) {
		return nil, &DamagedError{Path: f.Path, Err: fmt.Errorf(format, args...)}
	}
	i := bytes.IndexByte(b[:min(len(b), maxHeader)], '\n')
	if i < 0 {
		return damaged("no header line")
	}
	var h header
	dec := json.NewDecoder(bytes.NewReader(b[:i]))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&h); err != nil {
		return damaged("header: %v", err)
	}
	if h.Format != format {
		return damaged("header: format %q, want %q", h.Format, format)
	}
	raw := b[i+1:]
	if int64(len(raw)) != h.Size {
		return damaged("the bundle is %d bytes long, the header says %d", len(raw), h.Size)
	}
	sum := sha256.Sum256(raw)
	if hex.EncodeToString(sum[:]) != h.SHA256 {
		return damaged("the bundle's SHA-256 is not the one its header records")
	}
	bu, err := bundle.Read(bytes.NewReader(raw))
	if err != nil {
		return damaged("the bundle does not read: %v", err)
	}
	if bu.Manifest.Revision != h.Revision {
		return damaged("the bundle's revision is %q, the header says %q", bu.Manifest.Revision, h.Revision)
	}
	return &Saved{Bundle: bu, Raw: raw, SavedAt: h.SavedAt}, nil
}
