package resendtest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/mail"
	"slices"
	"strings"
)

// validate checks a POST /emails body as Resend does.
func (s *Server) validate(req map[string]json.RawMessage) (m Message, status int, name, text string) {
	for _, f := range []string{"from", "to", "subject"} {
		if _, ok := req[f]; !ok {
			return m, http.StatusUnprocessableEntity, "missing_required_field", fmt.Sprintf("Missing `%s` field.", f)
		}
	}
	if json.Unmarshal(req["from"], &m.From) != nil || !validAddress(m.From) {
		return m, http.StatusUnprocessableEntity, "validation_error", "Invalid `from` field. The email address needs to follow the `email@example.com` or `Name <email@example.com>` format."
	}
	var one string
	if json.Unmarshal(req["to"], &one) == nil {
		m.To = []string{one}
	} else if json.Unmarshal(req["to"], &m.To) != nil {
		return m, http.StatusUnprocessableEntity, "validation_error", "Invalid `to` field. The email address needs to follow the `email@example.com` or `Name <email@example.com>` format."
	}
	if len(m.To) == 0 || len(m.To) > 50 {
		return m, http.StatusUnprocessableEntity, "validation_error", "Invalid `to` field. Between 1 and 50 recipients are allowed."
	}
	for _, to := range m.To {
		if !validAddress(to) || s.refusedRecipient(to) {
			return m, http.StatusUnprocessableEntity, "validation_error", "Invalid `to` field. The email address needs to follow the `email@example.com` or `Name <email@example.com>` format."
		}
	}
	if json.Unmarshal(req["subject"], &m.Subject) != nil {
		return m, http.StatusUnprocessableEntity, "validation_error", "Invalid `subject` field: want a string."
	}
	_, hasHTML := req["html"]
	_, hasText := req["text"]
	if !hasHTML && !hasText {
		return m, http.StatusUnprocessableEntity, "missing_required_field", "Missing `html` or `text` field."
	}
	if hasHTML && json.Unmarshal(req["html"], &m.HTML) != nil {
		return m, http.StatusUnprocessableEntity, "validation_error", "Invalid `html` field: want a string."
	}
	if hasText && json.Unmarshal(req["text"], &m.Text) != nil {
		return m, http.StatusUnprocessableEntity, "validation_error", "Invalid `text` field: want a string."
	}
	if raw, ok := req["reply_to"]; ok {
		var one string
		if json.Unmarshal(raw, &one) == nil {
			m.ReplyTo = []string{one}
		} else if json.Unmarshal(raw, &m.ReplyTo) != nil {
			return m, http.StatusUnprocessableEntity, "validation_error", "Invalid `reply_to` field: want an address or a list of addresses."
		}
		for _, a := range m.ReplyTo {
			if !validAddress(a) {
				return m, http.StatusUnprocessableEntity, "validation_error", "Invalid `reply_to` field. The email address needs to follow the `email@example.com` or `Name <email@example.com>` format."
			}
		}
	}
	if raw, ok := req["headers"]; ok && json.Unmarshal(raw, &m.Headers) != nil {
		return m, http.StatusUnprocessableEntity, "validation_error", "Invalid `headers` field: want an object of strings."
	}
	if raw, ok := req["tags"]; ok {
		var tags []struct {
			Name  *string `json:"name"`
			Value *string `json:"value"`
		}
		if json.Unmarshal(raw, &tags) != nil {
			return m, http.StatusUnprocessableEntity, "validation_error", "Invalid `tags` field: want an array of {name, value}."
		}
		m.Tags = map[string]string{}
		for _, t := range tags {
			if t.Name == nil || t.Value == nil || !validTag(*t.Name) || !validTag(*t.Value) {
				return m, http.StatusUnprocessableEntity, "validation_error", "Invalid `tags` field: names and values may only contain ASCII letters, numbers, underscores and dashes, at most 256 characters."
			}
			m.Tags[*t.Name] = *t.Value
		}
	}
	for k, v := range m.Headers {
		if strings.EqualFold(k, "Message-ID") {
			m.MessageID = strings.Trim(strings.TrimSpace(v), "<>")
		}
	}
	s.mu.Lock()
	verified := slices.Clone(s.verified)
	s.mu.Unlock()
	if verified != nil {
		a, _ := mail.ParseAddress(m.From)
		domain := a.Address[strings.LastIndexByte(a.Address, '@')+1:]
		if !slices.Contains(verified, strings.ToLower(domain)) {
			return m, http.StatusForbidden, "validation_error", fmt.Sprintf("The %s domain is not verified. Please, add and verify your domain.", domain)
		}
	}
	return m, 0, "", ""
}

// validAddress accepts "a@b" and "Name <a@b>".
func validAddress(s string) bool {
	a, err := mail.ParseAddress(s)
	return err == nil && strings.Contains(a.Address, "@")
}

func validTag(s string) bool {
	if s == "" || len(s) > 256 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// refusedRecipient reports whether RefuseRecipients named to's address.
func (s *Server) refusedRecipient(to string) bool {
	a, err := mail.ParseAddress(to)
	if err != nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.refused[strings.ToLower(a.Address)]
}
