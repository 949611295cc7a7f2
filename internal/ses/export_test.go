package ses

import "net/http"

// SetTestTransport makes v fetch certificates and confirm subscriptions
// through client, and accept the hosts hostOK accepts (a test server's
// 127.0.0.1:port) instead of Amazon SNS's. Tests only.
func (v *WebhookVerifier) SetTestTransport(client *http.Client, hostOK func(hostport string) bool) {
	v.client, v.hostOK = client, hostOK
}
