package testenv

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"maps"
	netmail "net/mail"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// SpamAssassinVersion is the SpamAssassin the tests score mail with:
// Debian's package (bookworm's 4.0.1-1~deb12u1), which `make
// spamassassin` installs, with the rules the package ships.
const SpamAssassinVersion = "4.0.1"

// Where Debian's package keeps what it ships: the rules (its
// DEF_RULES_DIR, which sa-update never writes: its rules go to
// /var/lib/spamassassin) and the .pre files that load the plugins.
const (
	spamRulesDir  = "/usr/share/spamassassin"
	spamPluginDir = "/etc/spamassassin"
)

// StructuralSpamRules are SpamAssassin's rules about how a message is
// built rather than what it says, as its rule files name them
// (/usr/share/spamassassin: 20_html_tests.cf, 20_head_tests.cf,
// 20_body_tests.cf, 72_active.cf): text hidden by its style, its size
// or its colour; HTML without its plain-text part, or the two parts
// saying different things; missing or malformed headers; long hex words
// (a UUID mid-sentence); images in place of text; markup a careful
// writer does not produce. A message of ours may trip none, whatever
// its score (CheckSpamScores).
var StructuralSpamRules = []string{
	// Hidden text.
	"FONT_INVIS_DIRECT", "FONT_INVIS_DOTGOV", "FONT_INVIS_HTML_NOHTML", "FONT_INVIS_LONG_LINE", "FONT_INVIS_MSGID",
	"FONT_INVIS_NORDNS", "FONT_INVIS_POSTEXTRAS", "HTML_FONT_LOW_CONTRAST", "HTML_FONT_TINY_NORDNS",
	"HTML_TEXT_INVISIBLE_FONT", "HTML_TEXT_INVISIBLE_STYLE", "LONG_INVISIBLE_TEXT", "STY_INVIS_DIRECT", "TVD_VIS_HIDDEN",
	"HTML_OBFUSCATE_05_10", "HTML_OBFUSCATE_10_20", "HTML_OBFUSCATE_20_30", "HTML_OBFUSCATE_30_40",
	"HTML_OBFUSCATE_50_60", "HTML_OBFUSCATE_70_80", "HTML_OBFUSCATE_90_100",
	// HTML without its text, or the parts disagreeing.
	"MIME_HTML_ONLY", "MIME_HTML_ONLY_MULTI", "MIME_HTML_MOSTLY", "MIME_NO_TEXT", "MPART_ALT_DIFF", "MPART_ALT_DIFF_COUNT",
	"HTML_MIME_NO_HTML_TAG", "EMPTY_MESSAGE",
	// Missing or malformed headers and MIME.
	"MISSING_DATE", "MISSING_FROM", "MISSING_HEADERS", "MISSING_MID", "MISSING_SUBJECT", "MISSING_HB_SEP", "MISSING_MIME_HB_SEP",
	"NO_HEADERS_MESSAGE", "INVALID_DATE", "INVALID_DATE_TZ_ABSURD", "INVALID_MSGID", "MSGID_HDR_MALF", "MSGID_MULTIPLE_AT",
	"MSGID_NOFQDN1", "MSGID_SHORT", "MSGID_RANDY", "MSGID_SPAM_CAPS", "MSGID_SPAM_LETTERS",
	"DATE_IN_FUTURE_03_06", "DATE_IN_FUTURE_06_12", "DATE_IN_FUTURE_12_24", "DATE_IN_FUTURE_24_48", "DATE_IN_FUTURE_48_96", "DATE_IN_FUTURE_96_XX",
	"DATE_IN_PAST_03_06", "DATE_IN_PAST_06_12", "DATE_IN_PAST_12_24", "DATE_IN_PAST_24_48", "DATE_IN_PAST_96_XX",
	"BAD_ENC_HEADER", "FROM_EXCESS_BASE64", "FROM_ADDR_WS", "TO_MALFORMED", "SUBJ_ILLEGAL_CHARS", "HEADER_FROM_DIFFERENT_DOMAINS",
	"MIME_HEADER_CTYPE_ONLY", "MIME_BASE64_TEXT", "MIME_QP_LONG_LINE", "BASE64_LENGTH_78_79", "BASE64_LENGTH_79_INF",
	"MIME_BOUND_DD_DIGITS", "MIME_BOUND_DIGITS_15", "MIME_BOUND_EQ_REL", "MIME_BOUND_MANY_HEX", "MIME_BAD_ISO_CHARSET",
	"CTYPE_001C_A", "CTYPE_001C_B", "TVD_SPACE_RATIO", "TVD_SPACE_RATIO_MINFP", "TVD_SPACE_ENCODED", "UNRESOLVED_TEMPLATE",
	"HDR_ORDER_FTSDMCXX_001C", "HDR_ORDER_FTSDMCXX_BAT", "HDR_ORDER_FTSDMCXX_DIRECT", "HDR_ORDER_FTSDMCXX_NORDNS",
	// Long hex words: a hash, or a whole UUID, between words.
	"HEXHASH_WORD",
	// Images instead of text.
	"HTML_IMAGE_ONLY_04", "HTML_IMAGE_ONLY_08", "HTML_IMAGE_ONLY_12", "HTML_IMAGE_ONLY_16", "HTML_IMAGE_ONLY_20",
	"HTML_IMAGE_ONLY_24", "HTML_IMAGE_ONLY_28", "HTML_IMAGE_ONLY_32", "HTML_IMAGE_RATIO_02", "HTML_IMAGE_RATIO_04",
	"HTML_IMAGE_RATIO_06", "HTML_IMAGE_RATIO_08", "HTML_SHORT_LINK_IMG_1", "HTML_SHORT_LINK_IMG_2", "HTML_SHORT_LINK_IMG_3",
	// Markup a careful writer does not produce.
	"HTML_BADATTR", "HTML_BADTAG_40_50", "HTML_BADTAG_50_60", "HTML_BADTAG_60_70", "HTML_BADTAG_90_100", "HTML_EXTRA_CLOSE",
	"HTML_NONELEMENT_30_40", "HTML_NONELEMENT_40_50", "HTML_NONELEMENT_60_70", "HTML_NONELEMENT_80_90",
	"HTML_TAG_BALANCE_BODY", "HTML_TAG_BALANCE_HEAD", "HTML_TAG_BALANCE_CENTER", "HTML_COMMENT_SHORT", "HTML_OFF_PAGE",
	"HTML_TITLE_SUBJ_DIFF", "HTTPS_HTTP_MISMATCH",
}

// SpamReport is what SpamAssassin made of one message.
type SpamReport struct {
	// Score is the sum of the scores of the rules it tripped.
	Score float64
	// Rules are the rules it tripped, with their scores.
	Rules map[string]float64
}

// String lists the rules, highest score first: "2.7 (FONT_INVIS_MSGID
// 1, HEXHASH_WORD 1, HTML_FONT_LOW_CONTRAST 0.713)".
func (r SpamReport) String() string {
	names := slices.SortedFunc(maps.Keys(r.Rules), func(a, b string) int {
		if r.Rules[a] != r.Rules[b] {
			if r.Rules[a] > r.Rules[b] {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	})
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = n + " " + strconv.FormatFloat(r.Rules[n], 'f', -1, 64)
	}
	return fmt.Sprintf("%.3f (%s)", r.Score, strings.Join(parts, ", "))
}

// SpamScores scores each message of msgs (a name: the raw message as
// sent, headers and all) with Debian's SpamAssassin: local tests only
// (-L: no DNS, no network), the rules the package ships (its rules
// directory, never what sa-update fetched, nor a local.cf of the
// machine's), no Bayes, and ALL_TRUSTED not counted: it rewards a
// message for having come through trusted relays alone, as one handed
// straight to the scanner has, which says nothing about the message.
// One run scores them all. Without SpamAssassin the test fails, saying
// how to install it.
func SpamScores(t testing.TB, msgs map[string][]byte) map[string]SpamReport {
	t.Helper()
	bin := spamAssassin(t)
	dir := t.TempDir()
	// The plugins as Debian's package loads them, and our settings alone.
	pres, _ := filepath.Glob(filepath.Join(spamPluginDir, "*.pre"))
	if len(pres) == 0 {
		t.Fatalf("no %s/*.pre: Debian's spamassassin package installs them (apt-get install spamassassin, or `make spamassassin`)", spamPluginDir)
	}
	for _, p := range pres {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		WriteFile(t, filepath.Join(dir, "site", filepath.Base(p)), string(b))
	}
	WriteFile(t, filepath.Join(dir, "site", "local.cf"), strings.Join([]string{
		"use_bayes 0",
		"score ALL_TRUSTED 0",
		"report_safe 0",
		"add_header all Rules _TESTSSCORES(,)_",
	}, "\n")+"\n")
	WriteFile(t, filepath.Join(dir, "user_prefs"), "")

	// One mbox (mboxrd: a body line starting with From gets a >), each
	// message known again by its Message-ID.
	var mbox bytes.Buffer
	byID := map[string]string{}
	for _, name := range slices.Sorted(maps.Keys(msgs)) {
		raw := bytes.ReplaceAll(msgs[name], []byte("\r\n"), []byte("\n"))
		m, err := netmail.ReadMessage(bytes.NewReader(raw))
		if err != nil {
			t.Fatalf("%s is not a message: %v", name, err)
		}
		id := m.Header.Get("Message-ID")
		if id == "" || byID[id] != "" {
			t.Fatalf("%s: each message needs a Message-ID of its own (%q)", name, id)
		}
		byID[id] = name
		mbox.WriteString("From sekali@localhost Thu Jan  1 00:00:00 2026\n")
		for _, line := range strings.SplitAfter(string(raw), "\n") {
			if strings.HasPrefix(strings.TrimLeft(line, ">"), "From ") {
				mbox.WriteString(">")
			}
			mbox.WriteString(line)
		}
		if !bytes.HasSuffix(raw, []byte("\n")) {
			mbox.WriteString("\n")
		}
		mbox.WriteString("\n")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "-L", "--mbox", "--configpath="+spamRulesDir,
		"--siteconfigpath="+filepath.Join(dir, "site"), "-p", filepath.Join(dir, "user_prefs"))
	cmd.Env = append(os.Environ(), "HOME="+dir)
	cmd.Stdin = &mbox
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v\n%s", bin, err, stderr.String())
	}
	reports := map[string]SpamReport{}
	for _, m := range splitMbox(out) {
		msg, err := netmail.ReadMessage(bytes.NewReader(m))
		if err != nil {
			t.Fatalf("SpamAssassin's output: %v\n%s", err, m)
		}
		name, ok := byID[msg.Header.Get("Message-ID")]
		if !ok {
			t.Fatalf("SpamAssassin's output has a message we did not give it:\n%s", m)
		}
		r := SpamReport{Rules: map[string]float64{}}
		for _, rule := range strings.Split(strings.Join(strings.Fields(msg.Header.Get("X-Spam-Rules")), ""), ",") {
			if rule == "" || rule == "none" {
				continue
			}
			n, s, _ := strings.Cut(rule, "=")
			score, err := strconv.ParseFloat(s, 64)
			if err != nil {
				t.Fatalf("SpamAssassin's X-Spam-Rules %q: %v", msg.Header.Get("X-Spam-Rules"), err)
			}
			r.Rules[n] = score
			r.Score += score
		}
		reports[name] = r
	}
	if len(reports) != len(msgs) {
		t.Fatalf("SpamAssassin scored %d of the %d messages:\n%s", len(reports), len(msgs), stderr.String())
	}
	return reports
}

// CheckSpamScores scores msgs (SpamScores) and fails the test for each
// message that scores more than most, or trips any rule of
// StructuralSpamRules whatever its score.
func CheckSpamScores(t testing.TB, most float64, msgs map[string][]byte) {
	t.Helper()
	reports := SpamScores(t, msgs)
	for _, name := range slices.Sorted(maps.Keys(reports)) {
		r := reports[name]
		t.Logf("%s: SpamAssassin %s", name, r)
		if r.Score > most {
			t.Errorf("%s: SpamAssassin scores it %s; want at most %v", name, r, most)
		}
		for _, rule := range StructuralSpamRules {
			if _, hit := r.Rules[rule]; hit {
				t.Errorf("%s: SpamAssassin's %s, a rule about how a message is built: %s", name, rule, r)
			}
		}
	}
}

// splitMbox splits an mbox at its From lines.
func splitMbox(b []byte) [][]byte {
	var msgs [][]byte
	var cur *bytes.Buffer
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "From ") {
			if cur != nil {
				msgs = append(msgs, cur.Bytes())
			}
			cur = new(bytes.Buffer)
			continue
		}
		if cur != nil {
			cur.WriteString(line)
			cur.WriteByte('\n')
		}
	}
	if cur != nil {
		msgs = append(msgs, cur.Bytes())
	}
	return msgs
}

// spamVersion finds "4.0.1" in "SpamAssassin version 4.0.1".
var spamVersion = regexp.MustCompile(`SpamAssassin version (\S+)`)

// spamAssassin finds Debian's spamassassin of SpamAssassinVersion, and
// checks its rules are there.
func spamAssassin(t testing.TB) string {
	t.Helper()
	install := fmt.Sprintf("install it with `make spamassassin` (Debian's package spamassassin, %s, with the rules it ships)", SpamAssassinVersion)
	bin, err := exec.LookPath("spamassassin")
	if err != nil {
		t.Fatalf("the spam tests need SpamAssassin %s, and there is none on PATH: %s", SpamAssassinVersion, install)
	}
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		t.Fatalf("%s --version: %v: %s", bin, err, install)
	}
	if m := spamVersion.FindSubmatch(out); m == nil || string(m[1]) != SpamAssassinVersion {
		t.Fatalf("%s is not SpamAssassin %s (%q): %s", bin, SpamAssassinVersion, bytes.TrimSpace(out), install)
	}
	if _, err := os.Stat(filepath.Join(spamRulesDir, "50_scores.cf")); err != nil {
		t.Fatalf("SpamAssassin's shipped rules are not in %s (%v): %s", spamRulesDir, err, install)
	}
	return bin
}
