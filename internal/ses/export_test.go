package ses

import (
	"net/http"

	sekalimail "github.com/sekali-dev/sekali/internal/mail"
)

// SetTestTransport makes v fetch certificates and confirm subscriptions
// through client, and accept the hosts hostOK accepts (a test server's
// 127.0.0.1:port) instead of Amazon SNS's. Tests only.
func (v *WebhookVerifier) SetTestTransport(client *http.Client, hostOK func(hostport string) bool) {
	v.client, v.hostOK = client, hostOK
}

// PaceAnswer is a row of paceAnswers, for the tests.
type PaceAnswer = paceAnswer

// PaceAnswers are SES's answers about pace, and fields of a row.
var PaceAnswers = paceAnswers

func (a PaceAnswer) Who() string                   { return a.who }
func (a PaceAnswer) Status() int                   { return a.status }
func (a PaceAnswer) Types() []string               { return a.types }
func (a PaceAnswer) Message() string               { return a.message }
func (a PaceAnswer) Throttle() sekalimail.Throttle { return a.throttle }
