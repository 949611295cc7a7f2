package notify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sekali-dev/sekali/internal/dbsqlc"
	"github.com/sekali-dev/sekali/internal/mailtemplate"
)

// What a delivery's e-mail was when it went out. Each hand-over records
// in its history row the subject, the language and the digest of the
// template version that rendered the message (HandOverDeliveries), and
// every worker keeps the versions it loaded in template_versions when it
// starts (internal/worker's Run), so the operators see the e-mail as it was sent,
// not today's template rendered now.

// ErrVersionUnknown: the template version that rendered a hand-over is
// not known: the hand-over is older than the record of versions, or its
// version is not kept (or no longer loads).
var ErrVersionUnknown = errors.New("notify: the template version that rendered this e-mail is not known")

// KeepTemplateVersions stores the version of each of templates that
// template_versions does not have yet: a worker does it before it sends
// anything, so that every version a hand-over names is kept.
func KeepTemplateVersions(ctx context.Context, db DB, templates *mailtemplate.Templates) error {
	q := dbsqlc.New(db)
	for _, v := range templates.Versions() {
		p := dbsqlc.KeepTemplateVersionParams{Digest: v.Digest, Template: v.Template}
		for _, f := range v.Files {
			p.Paths, p.Contents = append(p.Paths, f.Path), append(p.Contents, f.Content)
		}
		if err := q.KeepTemplateVersion(ctx, p); err != nil {
			return fmt.Errorf("keep version %s of template %s: %w", v.Digest, v.Template, err)
		}
	}
	return nil
}

// HandOver is what a hand-over recorded of the message it gave the
// provider.
type HandOver struct {
	At       time.Time
	Provider string
	// Subject, Language and Version (the digest of the template version
	// that rendered it) are "" for a hand-over older than their record.
	Subject, Language, Version string
}

// LastHandOver is the latest hand-over in a delivery's history: the
// message the recipient got, if any reached them; ok is false when the
// delivery was never handed over.
func LastHandOver(events []Event) (h HandOver, ok bool) {
	for i := len(events) - 1; i >= 0; i-- {
		e := events[i]
		if e.Event != "handed_over" {
			continue
		}
		var detail struct {
			Provider        string `json:"provider"`
			Subject         string `json:"subject"`
			Language        string `json:"language"`
			TemplateVersion string `json:"template_version"`
		}
		_ = json.Unmarshal(e.Detail, &detail) // a detail it cannot read says nothing of the message
		return HandOver{At: e.At, Provider: detail.Provider, Subject: detail.Subject, Language: detail.Language,
			Version: detail.TemplateVersion}, true
	}
	return HandOver{}, false
}

// SentEmail renders d's e-mail as h handed it over: from d's stored data,
// with the template version that rendered it, in its language.
// ErrVersionUnknown when h names no version or names one that is not
// kept or no longer loads; the error says which.
func (o *Operator) SentEmail(ctx context.Context, d Delivery, h HandOver) (mailtemplate.Rendered, error) {
	if h.Version == "" || h.Language == "" {
		return mailtemplate.Rendered{}, fmt.Errorf("%w: its hand-over is older than the record of versions", ErrVersionUnknown)
	}
	row, err := dbsqlc.New(o.db).GetTemplateVersion(ctx, h.Version)
	if errors.Is(err, pgx.ErrNoRows) {
		return mailtemplate.Rendered{}, fmt.Errorf("%w: version %s is not kept", ErrVersionUnknown, h.Version)
	}
	if err != nil {
		return mailtemplate.Rendered{}, fmt.Errorf("read template version %s: %w", h.Version, err)
	}
	v := mailtemplate.Version{Template: row.Template, Digest: row.Digest}
	for i, p := range row.Paths {
		v.Files = append(v.Files, mailtemplate.File{Path: p, Content: row.Contents[i]})
	}
	t, err := mailtemplate.LoadVersion(v, h.Language)
	if err != nil {
		return mailtemplate.Rendered{}, fmt.Errorf("%w: version %s no longer loads: %w", ErrVersionUnknown, h.Version, err)
	}
	r, err := t.Render(row.Template, d.Data)
	if err != nil {
		return mailtemplate.Rendered{}, fmt.Errorf("%w: version %s no longer renders this delivery's data: %w", ErrVersionUnknown, h.Version, err)
	}
	return r, nil
}

// BatchMembers are the deliveries of a recorded batch, in the order its
// request carried them; none when no such batch is kept.
func BatchMembers(ctx context.Context, db DB, key string) ([]Delivery, error) {
	rows, err := dbsqlc.New(db).ListBatchMembers(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("read the members of batch %s: %w", key, err)
	}
	return mapRows(rows, fromRow), nil
}
