package smtpsink

import (
	"bytes"
	"encoding/json"
	"mime"
	"net/http"
	"net/mail"
	"slices"
	"strings"
	"time"
)

// Handler returns the HTTP look-up API. It answers the subset of the Mailpit
// and MailHog APIs that tells whether a message was accepted:
//
//	GET /api/v1/search?query=message-id:<id>        Mailpit
//	GET /api/v2/search?kind=containing&query=<text> MailHog
//	GET /api/v1/info, GET /api/v2/messages          what tells them apart (counts only)
//
// Both search every recorded message, including those DropAfterData hung up
// on: the sink has them, as a provider may have a message whose 250 reply was
// lost. Both return every match (no paging). Unknown paths get 404, a missing
// or unsupported query 400.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /api/v1/search", s.handleMailpitSearch())
	mux.Handle("GET /api/v2/search", s.handleMailHogSearch())
	// What a client asks to tell which API a server speaks.
	mux.HandleFunc("GET /api/v1/info", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, map[string]any{"Version": "smtpsink", "Messages": s.Count()})
	})
	mux.HandleFunc("GET /api/v2/messages", func(w http.ResponseWriter, _ *http.Request) {
		n := s.Count()
		writeJSON(w, mailhogResult{Total: n, Count: 0, Items: []mailhogItem{}})
	})
	return mux
}

// mailpitSummary is Mailpit's MessagesSummary. As in Mailpit, "total" counts
// every message in the mailbox and "messages_count" those matching the query.
type mailpitSummary struct {
	Total          int              `json:"total"`
	Unread         int              `json:"unread"`
	Count          int              `json:"count"`
	MessagesCount  int              `json:"messages_count"`
	MessagesUnread int              `json:"messages_unread"`
	Start          int              `json:"start"`
	Tags           []string         `json:"tags"`
	Messages       []mailpitMessage `json:"messages"`
}

// mailpitMessage is the part of Mailpit's MessageSummary the sink can fill.
type mailpitMessage struct {
	ID        string
	MessageID string
	Read      bool
	From      *mailpitAddress
	To        []mailpitAddress
	Subject   string
	Created   time.Time
	Tags      []string
	Size      int
}

type mailpitAddress struct {
	Name    string
	Address string
}

// handleMailpitSearch answers a Mailpit search with a single message-id:
// term. Like Mailpit, it matches Message-IDs containing the term, ignoring
// case, and lists the newest message first.
func (s *Server) handleMailpitSearch() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		query := strings.TrimSpace(r.URL.Query().Get("query"))
		if query == "" {
			http.Error(w, "Error: no search query", http.StatusBadRequest)
			return
		}
		prefix, term, ok := strings.Cut(query, ":")
		if !ok || !strings.EqualFold(prefix, "message-id") {
			http.Error(w, "Error: smtpsink supports only message-id:<id> searches", http.StatusBadRequest)
			return
		}
		term = strings.ToLower(trimBrackets(strings.Trim(strings.TrimSpace(term), `"`)))
		if term == "" {
			http.Error(w, "Error: empty message-id", http.StatusBadRequest)
			return
		}

		all := s.Messages()
		res := mailpitSummary{Total: len(all), Unread: len(all), Tags: []string{}, Messages: []mailpitMessage{}}
		for _, m := range slices.Backward(all) {
			if m.MessageID != "" && strings.Contains(strings.ToLower(m.MessageID), term) {
				res.Messages = append(res.Messages, toMailpit(m))
			}
		}
		res.Count = len(res.Messages)
		res.MessagesCount = len(res.Messages)
		res.MessagesUnread = len(res.Messages)
		writeJSON(w, res)
	})
}

func toMailpit(m Message) mailpitMessage {
	out := mailpitMessage{
		ID:        m.QueueID,
		MessageID: m.MessageID,
		Subject:   decodeHeader(m.Header.Get("Subject")),
		Created:   m.ReceivedAt,
		Tags:      []string{},
		Size:      len(m.Data),
		To:        []mailpitAddress{},
	}
	if from, err := mail.ParseAddress(m.Header.Get("From")); err == nil {
		out.From = &mailpitAddress{Name: from.Name, Address: from.Address}
	}
	// Mailpit lists the To header; without a usable one, the envelope's.
	if to, err := m.Header.AddressList("To"); err == nil {
		for _, a := range to {
			out.To = append(out.To, mailpitAddress{Name: a.Name, Address: a.Address})
		}
	} else {
		for _, a := range m.To {
			out.To = append(out.To, mailpitAddress{Address: a})
		}
	}
	return out
}

// mailhogResult is the reply of MailHog's /api/v2/search.
type mailhogResult struct {
	Total int           `json:"total"`
	Count int           `json:"count"`
	Start int           `json:"start"`
	Items []mailhogItem `json:"items"`
}

// mailhogItem is the part of MailHog's message the sink fills. Headers keep
// the names as the message spelled them ("Message-ID"), as MailHog does.
type mailhogItem struct {
	ID      string
	Content mailhogContent
	Created time.Time
}

type mailhogContent struct {
	Headers map[string][]string
	Body    string
	Size    int
}

// handleMailHogSearch answers MailHog's "containing" search: messages whose
// raw data contains the query, ignoring case, oldest first.
func (s *Server) handleMailHogSearch() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		query := q.Get("query")
		if query == "" {
			http.Error(w, "missing query", http.StatusBadRequest)
			return
		}
		if kind := q.Get("kind"); kind != "containing" {
			http.Error(w, "smtpsink supports only kind=containing, got "+kind, http.StatusBadRequest)
			return
		}

		query = strings.ToLower(query)
		res := mailhogResult{Items: []mailhogItem{}}
		for _, m := range s.Messages() {
			if strings.Contains(strings.ToLower(string(m.Data)), query) {
				res.Items = append(res.Items, toMailHog(m))
			}
		}
		res.Total = len(res.Items)
		res.Count = len(res.Items)
		writeJSON(w, res)
	})
}

func toMailHog(m Message) mailhogItem {
	headers, body := splitRaw(m.Data)
	return mailhogItem{
		ID:      m.QueueID,
		Content: mailhogContent{Headers: headers, Body: body, Size: len(m.Data)},
		Created: m.ReceivedAt,
	}
}

// splitRaw splits a raw message into its header fields, names spelled as in
// the message and folded lines unfolded, and its body.
func splitRaw(data []byte) (map[string][]string, string) {
	headers := map[string][]string{}
	var last string // name of the field a folded line continues
	for rest := data; len(rest) > 0; {
		raw, after, _ := bytes.Cut(rest, []byte("\n"))
		rest = after
		line := strings.TrimSuffix(string(raw), "\r")
		if line == "" {
			return headers, string(rest)
		}
		if line[0] == ' ' || line[0] == '\t' {
			if vs := headers[last]; len(vs) > 0 {
				vs[len(vs)-1] += " " + strings.TrimSpace(line)
			}
			continue
		}
		name, value, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		last = strings.TrimSpace(name)
		headers[last] = append(headers[last], strings.TrimSpace(value))
	}
	return headers, ""
}

func decodeHeader(v string) string {
	dec := new(mime.WordDecoder)
	if d, err := dec.DecodeHeader(v); err == nil {
		return d
	}
	return v
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	// An error here means the client went away; there is no one to tell.
	_ = json.NewEncoder(w).Encode(v)
}
