package testenv

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// Every rule StructuralSpamRules names is one of the rules Debian's
// SpamAssassin ships: a misspelt name would never be tripped, and pass.
func TestStructuralSpamRulesAreSpamAssassins(t *testing.T) {
	t.Parallel()
	spamAssassin(t)
	files, _ := filepath.Glob(filepath.Join(spamRulesDir, "*.cf"))
	defined := map[string]bool{}
	rule := regexp.MustCompile(`(?m)^\s*(?:header|body|rawbody|full|meta|mimeheader|uri)\s+([A-Z][A-Z0-9_]+)\s`)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range rule.FindAllSubmatch(b, -1) {
			defined[string(m[1])] = true
		}
	}
	for _, name := range StructuralSpamRules {
		if !defined[name] {
			t.Errorf("%s is not a rule of %s", name, spamRulesDir)
		}
	}
}

// The check sees what the issue saw: a preheader hidden four ways at
// once (display:none, a 1px font, the background's colour, opacity 0)
// and an order's UUID mid-sentence, twice, trip FONT_INVIS_MSGID,
// HTML_FONT_LOW_CONTRAST and HEXHASH_WORD, and the message scores over
// 1.0; the same message with the preheader hidden by display:none
// alone and the short id scores under it.
func TestSpamScoresSeeHiddenTextAndHexWords(t *testing.T) {
	t.Parallel()
	msg := func(id, style, order string) []byte {
		body := "Hi Maria,\n\nYour order " + order + " left our warehouse today.\nThe order " + order + " has two items.\n"
		html := `<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>Your order</title></head>` +
			`<body style="background-color:#f3f4f6"><div style="` + style + `">Your order is on its way.</div>` +
			"<p>Hi Maria,</p><p>Your order " + order + " left our warehouse today.</p><p>The order " + order + " has two items.</p></body></html>\n"
		return []byte(strings.Join([]string{
			"From: \"Toko Ana\" <orders@shop.example>",
			"To: <maria@example.com>",
			"Subject: Your order is on its way",
			"Date: Mon, 07 Dec 2026 09:00:00 +0000",
			"Message-ID: <" + id + "@shop.example>",
			"MIME-Version: 1.0",
			`Content-Type: multipart/alternative; boundary="b1"`,
			"",
			"--b1",
			"Content-Type: text/plain; charset=UTF-8",
			"",
			body,
			"--b1",
			"Content-Type: text/html; charset=UTF-8",
			"",
			html,
			"--b1--",
			"",
		}, "\r\n"))
	}
	reports := SpamScores(t, map[string][]byte{
		"four ways": msg("6f1c2d3e4a5b6c7d8e9f0a1b2c3d4e5f", "display:none;max-height:0;overflow:hidden;font-size:1px;line-height:1px;color:#f3f4f6;opacity:0",
			"01a250d5-fe12-7e10-9b96-545609f9fafd"),
		"display none": msg("7a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d", "display:none;max-height:0;max-width:0;overflow:hidden", "01A250D5"),
	})
	bad, good := reports["four ways"], reports["display none"]
	for _, rule := range []string{"FONT_INVIS_MSGID", "HTML_FONT_LOW_CONTRAST", "HEXHASH_WORD"} {
		if _, hit := bad.Rules[rule]; !hit {
			t.Errorf("the preheader hidden four ways and the UUID: no %s: %s", rule, bad)
		}
	}
	if bad.Score <= 1.0 || good.Score > 1.0 {
		t.Errorf("four ways scores %s, display:none alone %s; want over 1.0 and at most 1.0", bad, good)
	}
	for _, rule := range StructuralSpamRules {
		if _, hit := good.Rules[rule]; hit {
			t.Errorf("display:none alone trips %s: %s", rule, good)
		}
	}
}
