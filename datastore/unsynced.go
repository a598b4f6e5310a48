package datastore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"time"
)

// Unsynced commits. A commit waits for the disk twice (bbolt fsyncs its
// pages, then its meta page): on a busy replica that is most of the CPU
// time an apply costs, and all of its latency. A store whose every write
// can be had again elsewhere (a cluster replica's: the log holds every
// entry after the store's revision, and snapshots the rest) may skip it.
//
// What is at stake is not the last commits (the log has them) but a torn
// file: after a commit without fsync, the kernel writes the pages back in
// its own order, so an operating system that stops before it has written
// them all (a crash, a power cut) can leave a meta page that names pages
// holding older data, a store that claims a revision it does not hold. A
// process that dies loses nothing: the kernel still has everything it
// wrote, and the next process reads that. So the record beside the data
// file names the boot (the running kernel) in which commits went
// unsynced; Open trusts the file when it is the same boot and moves it
// aside otherwise.

// unsyncedSuffix names the record, beside the data file, of a store that
// commits without fsync: it holds the boot ID of the kernel it runs on.
const unsyncedSuffix = ".unsynced"

// bootIDPath is where Linux tells the running kernel's boot ID.
const bootIDPath = "/proc/sys/kernel/random/boot_id"

// bootID returns the running kernel's boot ID ("" where unknown).
func bootID() string {
	if runtime.GOOS != "linux" {
		return ""
	}
	b, err := os.ReadFile(bootIDPath)
	if err != nil {
		return ""
	}
	return string(bytes.TrimSpace(b))
}

// Unsync makes the store's commits stop waiting for the disk until Close,
// for a store whose every write can be had again from elsewhere (a
// cluster replica's). It first records, durably, beside the data file
// (<path>.unsynced), the boot of the running kernel; Close syncs the file
// and removes the record. Open of a file whose record names another boot
// (the operating system stopped while commits were unsynced, and may have
// written them out in part) moves the file aside, to
// <path>.torn-<UTC time>, and starts an empty store; a record of the
// same boot (the process died, the kernel kept what it wrote) is synced
// and removed. Unsync is for Linux, where the boot is known; elsewhere
// it returns an error wrapping errors.ErrUnsupported and commits go on
// waiting for the disk.
func (s *BoltStore) Unsync(ctx context.Context) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	if s.cfg.ReadOnly {
		return errors.New("datastore: unsync: store opened read-only")
	}
	boot := bootID()
	if boot == "" {
		return fmt.Errorf("datastore: unsync: the running kernel's boot is unknown here: %w", errors.ErrUnsupported)
	}
	s.mu.Lock() // every commit holds mu: none is running
	defer s.mu.Unlock()
	if s.db.NoSync() {
		return nil
	}
	if err := writeDurably(s.cfg.Path+unsyncedSuffix, []byte(boot+"\n")); err != nil {
		return fmt.Errorf("datastore: unsync: %w", err)
	}
	s.db.SetNoSync(true)
	s.log.Info("datastore commits no longer wait for the disk", "path", s.cfg.Path)
	return nil
}

// syncUnsynced makes the data file durable and removes the record of
// unsynced commits, at Close. The record stays if the sync fails.
func (s *BoltStore) syncUnsynced() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.db.NoSync() {
		return nil
	}
	if err := s.db.Sync(); err != nil {
		return fmt.Errorf("datastore: close: sync: %w", err)
	}
	s.db.SetNoSync(false)
	return removeDurably(s.cfg.Path + unsyncedSuffix)
}

// checkUnsynced runs before Open opens the data file at path. With no
// record of unsynced commits it does nothing. With a record of the
// running boot it returns same=true: once the file is open (and so no
// other process has it), Open syncs it and removes the record. With a
// record of another boot it moves the file aside (nobody can have it open:
// its writer ran before this kernel started) and removes the record; a
// read-only Open fails instead.
func checkUnsynced(cfg Config) (same bool, err error) {
	rec := cfg.Path + unsyncedSuffix
	b, err := os.ReadFile(rec)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("datastore: open %s: %w", cfg.Path, err)
	}
	recorded, boot := string(bytes.TrimSpace(b)), bootID()
	if recorded != "" && recorded == boot {
		return true, nil
	}
	if cfg.ReadOnly {
		return false, &CorruptError{Path: cfg.Path, Op: "open", Err: fmt.Errorf("its commits were not synced when the operating system stopped (boot %q, now %q): it may be torn; open it read-write to move it aside", recorded, boot)}
	}
	aside := cfg.Path + ".torn-" + time.Now().UTC().Format("20060102T150405.000000000Z")
	switch err := os.Rename(cfg.Path, aside); {
	case errors.Is(err, fs.ErrNotExist):
		aside = ""
	case err != nil:
		return false, fmt.Errorf("datastore: open %s: move a file that may be torn aside: %w", cfg.Path, err)
	}
	if err := removeDurably(rec); err != nil {
		return false, fmt.Errorf("datastore: open %s: %w", cfg.Path, err)
	}
	if aside != "" {
		cfg.Logger.Error("datastore: the data file's commits were not synced when the operating system stopped, so it may be torn: it was moved aside and the store starts empty",
			"path", cfg.Path, "moved_to", aside, "boot", recorded, "now", boot)
	}
	return false, nil
}

// writeDurably writes data to path through a synced temporary file, a
// rename and a synced directory.
func writeDurably(path string, data []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return syncDir(filepath.Dir(path))
}

// removeDurably removes path (missing is fine) and syncs its directory.
func removeDurably(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return syncDir(filepath.Dir(path))
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
