package httpapi

import (
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/google/uuid"

	"github.com/sekali-dev/sekali/internal/notify"
)

// The console's activity: what operators did, newest first, from
// operator_actions.

// activityRow is one action as the activity page shows it.
type activityRow struct {
	notify.Action
	Link    string       // the target's page in the console, "" when it has none
	Details []activityKV // the detail, key by key
}

type activityKV struct{ Key, Value string }

func handleConsoleActivity(ops *notify.Operator) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		before, _ := strconv.ParseInt(r.URL.Query().Get("before"), 10, 64)
		actions, err := ops.Actions(r.Context(), max(before, 0), consolePageSize+1)
		if err != nil {
			setLogError(r.Context(), err)
			consoleError(w, r, http.StatusInternalServerError, "The activity could not be read; try again.")
			return
		}
		p := page{Title: "Activity", Session: sessionOf(r)}
		if len(actions) > consolePageSize {
			actions = actions[:consolePageSize]
			p.Next = "/admin/activity?before=" + strconv.FormatInt(actions[len(actions)-1].ID, 10)
		}
		if before > 0 {
			p.Prev = "/admin/activity"
		}
		for _, a := range actions {
			p.Activity = append(p.Activity, activityRow{Action: a, Link: targetLink(a.Target), Details: details(a.Detail)})
		}
		render(w, r, http.StatusOK, "activity", p)
	})
}

// targetLink is the console's page of what an action was done to, if it
// has one: a delivery, an address on the suppression list, a webhook
// endpoint.
func targetLink(target string) string {
	kind, id, _ := strings.Cut(target, ":")
	switch kind {
	case "delivery":
		if _, err := uuid.Parse(id); err == nil {
			return "/admin/deliveries/" + id
		}
	case "recipient":
		return "/admin/suppressions?" + url.Values{"recipient": {id}}.Encode()
	case "webhook_endpoint":
		if _, err := uuid.Parse(id); err == nil {
			return "/admin/webhooks/" + id
		}
	}
	return ""
}

// details lists an action's detail key by key, in key order: text as it
// is, a list of texts joined by commas, anything else as JSON;
// "unchanged" only when the action found nothing to change.
func details(raw json.RawMessage) []activityKV {
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil {
		return []activityKV{{Key: "detail", Value: string(raw)}}
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var out []activityKV
	for _, k := range keys {
		v := string(m[k])
		var s string
		var list []string
		switch {
		case json.Unmarshal(m[k], &s) == nil:
			v = s
		case json.Unmarshal(m[k], &list) == nil:
			v = strings.Join(list, ", ")
		}
		if k == "unchanged" && v == "false" || v == "" {
			continue
		}
		out = append(out, activityKV{Key: k, Value: v})
	}
	return out
}
