package mail

import "strings"

// TestDomain is the domain of test mode's magic recipients
// (docs/testmode.md): a name under .test, which RFC 2606 and RFC 6761
// reserve for testing, so that no real mailbox has it and no resolver
// answers for it. Only test keys' notifications may go to it, and they
// never reach a provider: the worker's test provider takes them and
// reports, as a provider's webhook would, what the address's local part
// (delivered, bounced, complained, delayed, unsubscribed) asks for.
const TestDomain = "sekali.test"

// IsTestAddress reports whether a normalized address is at TestDomain
// or any name under it (x@sub.sekali.test): the whole domain is test
// mode's, so that no live key mails a name of it through a real
// provider, which would try to deliver it.
func IsTestAddress(addr string) bool {
	_, domain, _ := strings.Cut(addr, "@")
	return domain == TestDomain || strings.HasSuffix(domain, "."+TestDomain)
}

// TestProvider is the name of the worker's built-in test provider, which
// takes every test notification and nothing else: the provider a test
// delivery's hand-over records, and the provider of the feedback it
// reports.
const TestProvider = "test"
