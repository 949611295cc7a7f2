package mailtemplate

import (
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"sync"
)

// Reloading is a development aid: with Config.Reload (TEMPLATES_RELOAD,
// which make run turns on; off unless set), the registry reads
// Config.Dir again when its files change, so that an edited template
// shows on the next preview and the next send without a restart. Every
// read of the registry looks at the directory's files (their names,
// sizes and times: a few stat calls) and loads it again, with every
// check of Load, when they differ. A load that fails keeps the
// templates it had, and says why through Config.OnReload: the next edit
// may fix it. In production the registry is what the binary started
// with, and a deploy is what changes it.

// reloader holds the templates a reloading registry loaded last.
type reloader struct {
	cfg   Config // without Reload: what each load loads
	mu    sync.Mutex
	cur   *Templates // a registry of its own, without a reloader
	stamp string     // the directory's files as cur was loaded from them
}

// loadReloading is Load of cfg with Reload.
func loadReloading(cfg Config) (*Templates, error) {
	r := &reloader{cfg: cfg}
	r.cfg.Reload = false
	stamp, err := dirStamp(cfg.Dir) // before the load: an edit meanwhile is read again
	if err != nil {
		return nil, &LoadError{Problems: []Problem{{File: cfg.Dir, Message: "cannot read the templates directory: " + err.Error()}}}
	}
	t, err := Load(r.cfg)
	if err != nil {
		return nil, err
	}
	r.cur, r.stamp = t, stamp
	return &Templates{byName: t.byName, live: r}, nil
}

// current is the registry a read uses: t itself, or the newest a
// reloading t loaded.
func (t *Templates) current() *Templates {
	if t.live == nil {
		return t
	}
	return t.live.get()
}

// get loads the directory again if its files changed since the last
// load, and returns the newest templates that loaded.
func (r *reloader) get() *Templates {
	r.mu.Lock()
	defer r.mu.Unlock()
	stamp, err := dirStamp(r.cfg.Dir)
	if err != nil || stamp == r.stamp {
		return r.cur // unreadable for a moment (an editor's rename), or unchanged
	}
	r.stamp = stamp
	t, err := Load(r.cfg)
	if err == nil {
		r.cur = t
	}
	if r.cfg.OnReload != nil {
		r.cfg.OnReload(t, err)
	}
	return r.cur
}

// dirStamp describes every file under dir by its path, size, time and
// mode: two stamps differ when a file was added, removed or written.
func dirStamp(dir string) (string, error) {
	var b strings.Builder
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%s %d %d %s\n", path, info.Size(), info.ModTime().UnixNano(), info.Mode())
		return nil
	})
	return b.String(), err
}
