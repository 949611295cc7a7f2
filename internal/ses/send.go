package ses

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sesv2"
	"github.com/aws/aws-sdk-go-v2/service/sesv2/types"
	"github.com/aws/smithy-go"

	"github.com/sekali-dev/sekali/internal/envconfig"
	"github.com/sekali-dev/sekali/internal/httpprovider"
	"github.com/sekali-dev/sekali/internal/mail"
	"github.com/sekali-dev/sekali/internal/mailmime"
)

// Config configures sending through SES's v2 API (SendEmail with raw
// content). Credentials come from the AWS SDK's default chain:
// AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_PROFILE and the shared
// files, web identity (EKS), the container or instance role.
type Config struct {
	Region           string        // SES_REGION; AWS_REGION (the SDK's chain) when empty
	Endpoint         string        // SES_ENDPOINT: the API's URL, for a VPC endpoint or a test server; SES's regional endpoint when empty
	ConfigurationSet string        // SES_CONFIGURATION_SET: the set whose event destination publishes to SNS (the feedback webhook)
	From             string        // MAIL_FROM: an identity verified in SES, with a display name or without
	Timeout          time.Duration // PROVIDER_TIMEOUT: one request, counted from before the hand-over
}

// configurationSetName is SES's rule for a configuration set's name.
var configurationSetName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// Validate checks the configuration and reports every problem at once.
func (c Config) Validate() error {
	var errs []error
	if _, err := mail.ParseSender(c.From); err != nil {
		errs = append(errs, fmt.Errorf("MAIL_FROM: %w", err))
	}
	if c.Endpoint != "" {
		if _, err := httpprovider.BaseURL(c.Endpoint, "https://email.eu-west-1.amazonaws.com"); err != nil {
			errs = append(errs, fmt.Errorf("SES_ENDPOINT: %w", err))
		}
	}
	if c.ConfigurationSet != "" && !configurationSetName.MatchString(c.ConfigurationSet) {
		errs = append(errs, fmt.Errorf("SES_CONFIGURATION_SET %q: letters, digits, _ and -, at most 64", c.ConfigurationSet))
	}
	if c.Timeout < 0 {
		errs = append(errs, fmt.Errorf("PROVIDER_TIMEOUT %v: must be positive", c.Timeout))
	}
	return errors.Join(errs...)
}

// ReadEnv reads the SES_* variables of sending; From and Timeout are the
// worker's to set before Validate.
func ReadEnv(env *envconfig.Reader) Config {
	return Config{
		Region:           env.String("SES_REGION", ""),
		Endpoint:         env.String("SES_ENDPOINT", ""),
		ConfigurationSet: env.String("SES_CONFIGURATION_SET", ""),
	}
}

// Open implements mail.SenderConfig.
func (c Config) Open() (mail.Provider, func(), error) { return mail.Opened(New(c)) }

// SendTimeout implements mail.SenderConfig: PROVIDER_TIMEOUT.
func (c Config) SendTimeout() (time.Duration, string) { return c.Timeout, "PROVIDER_TIMEOUT" }

func (c Config) String() string {
	if c.Endpoint != "" {
		return "ses " + c.Endpoint
	}
	return "ses " + c.Region
}

// Provider sends through SES's v2 API. It implements mail.Provider and
// mail.LimitsReporter.
type Provider struct {
	cfg    Config
	sender mail.Sender
	http   *httpprovider.SDKClient
	client *sesv2.Client
}

// New returns an SES provider: cfg must be valid, and a region must be
// known (SES_REGION, or the SDK's AWS_REGION and profile).
func New(cfg Config) (*Provider, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	sender, _ := mail.ParseSender(cfg.From)
	var opts []func(*config.LoadOptions) error
	if cfg.Region != "" {
		opts = append(opts, config.WithRegion(cfg.Region))
	}
	awsCfg, err := config.LoadDefaultConfig(context.Background(), opts...)
	if err != nil {
		return nil, fmt.Errorf("ses: AWS configuration: %w", err)
	}
	if awsCfg.Region == "" {
		return nil, errors.New("ses: no region: set SES_REGION (or AWS_REGION)")
	}
	p := &Provider{cfg: cfg, sender: sender, http: httpprovider.NewSDKClient(cfg.Timeout)}
	p.client = sesv2.NewFromConfig(awsCfg, func(o *sesv2.Options) {
		o.HTTPClient = p.http
		// Never a retry of the SDK's own: one after a request written
		// whole could be a second e-mail. The worker retries, under its
		// lease, when nothing can have been sent.
		o.Retryer = aws.NopRetryer{}
		o.RetryMaxAttempts = 0
		if cfg.Endpoint != "" {
			o.BaseEndpoint = aws.String(strings.TrimRight(cfg.Endpoint, "/"))
		}
	})
	return p, nil
}

// Close closes idle connections.
func (p *Provider) Close() { p.http.Close() }

// Send implements mail.Provider: our raw MIME message, so that
// Auto-Submitted and List-Unsubscribe go as we built them (SES replaces
// the Message-ID with its own), tagged with the key's hash (TagKey),
// which SES's events echo. SES deduplicates by no key of ours, so the
// message carries none: the key names the order and the customer's
// address, which no server on the way needs.
func (p *Provider) Send(ctx context.Context, m mail.Message, handOver func() error) (string, error) {
	to, err := httpprovider.CheckMessage(m)
	if err != nil {
		return "", httpprovider.ComposeError(err)
	}
	raw, err := mailmime.Compose(m, mailmime.Options{From: p.sender})
	if err != nil {
		return "", httpprovider.ComposeError(err)
	}
	in := &sesv2.SendEmailInput{
		FromEmailAddress: aws.String(p.sender.Address),
		Destination:      &types.Destination{ToAddresses: []string{to}},
		Content:          &types.EmailContent{Raw: &types.RawMessage{Data: raw}},
		EmailTags:        []types.MessageTag{{Name: aws.String(TagKey), Value: aws.String(mail.KeyHash(m.IdempotencyKey))}},
	}
	if p.cfg.ConfigurationSet != "" {
		in.ConfigurationSetName = aws.String(p.cfg.ConfigurationSet)
	}
	sctx, ex := httpprovider.WithHandOver(ctx, handOver)
	out, err := p.client.SendEmail(sctx, in)
	if err != nil {
		return "", classifySend(err, ex, p.sender.Address, to)
	}
	if out.MessageId == nil || *out.MessageId == "" {
		return "", &mail.SendError{Outcome: mail.OutcomeAmbiguous, Stage: mail.StageData, Reply: mail.HTTPStatus(http.StatusOK), HandedOver: true,
			Err: errors.New("ses answered 200 without a MessageId")}
	}
	return *out.MessageId, nil
}

// Limits implements mail.LimitsReporter: GetAccount's SendQuota, which
// needs ses:GetAccount (the probe's permission too) and sends nothing.
// An unlimited daily quota (-1) is Daily 0; a quota of none at all (an
// account that may send nothing) is an error, which Daily 0 would hide.
func (p *Provider) Limits(ctx context.Context) (mail.Limits, error) {
	out, err := p.client.GetAccount(ctx, &sesv2.GetAccountInput{})
	if err != nil {
		return mail.Limits{}, classifySend(err, nil, "", "")
	}
	q := out.SendQuota
	if q == nil {
		return mail.Limits{}, &mail.SendError{Outcome: mail.OutcomeUnavailable, Stage: mail.StageAuth, Reply: mail.HTTPStatus(http.StatusOK),
			Err: errors.New("ses: GetAccount answered no SendQuota")}
	}
	if q.Max24HourSend >= 0 && q.Max24HourSend < 1 {
		return mail.Limits{}, &mail.SendError{Outcome: mail.OutcomeUnavailable, Stage: mail.StageAuth, Reply: mail.HTTPStatus(http.StatusOK),
			Err: fmt.Errorf("ses: the account may send no message in 24 hours (Max24HourSend %v)", q.Max24HourSend)}
	}
	return mail.Limits{Rate: q.MaxSendRate, Daily: max(int(q.Max24HourSend), 0), SentDaily: int(q.SentLast24Hours)}, nil
}

// Probe implements mail.Provider: GetAccount, which sends nothing and
// fails as a send would on credentials, region or throttling, and says
// whether the account may send.
func (p *Provider) Probe(ctx context.Context) error {
	out, err := p.client.GetAccount(ctx, &sesv2.GetAccountInput{})
	if err != nil {
		se := classifySend(err, nil, "", "")
		if se.Outcome != mail.OutcomeUnavailable {
			se = &mail.SendError{Outcome: mail.OutcomeUnavailable, Stage: se.Stage, Reply: se.Reply, Err: se.Err}
		}
		return se
	}
	if !out.SendingEnabled {
		return &mail.SendError{Outcome: mail.OutcomeUnavailable, Stage: mail.StageAuth, Reply: mail.HTTPStatus(http.StatusOK),
			Err: fmt.Errorf("ses: sending is paused for this account (enforcement status %s)", aws.ToString(out.EnforcementStatus))}
	}
	return nil
}

// classifySend decides what a failed request means for the delivery
// (https://docs.aws.amazon.com/ses/latest/APIReference-V2/API_SendEmail.html#API_SendEmail_Errors
// and the common errors). SES keeps no key of ours, so an answer that
// may follow a sent message is ambiguous; only an answer about the
// recipient fails a delivery:
//
//	answer                                              outcome
//	hand-over refused                                   aborted (nothing sent)
//	no answer, request not written whole               unavailable (connect)
//	no answer after the request was written            ambiguous
//	MessageRejected "Email address is not verified"
//	  naming the recipient and not MAIL_FROM (the sandbox: only verified
//	  recipients)                                       permanent (recipient)
//	  otherwise (our identity)                          unavailable (sender)
//	MessageRejected, anything else (content)            temporary (data)
//	MailFromDomainNotVerifiedException, NotFoundException (configuration set),
//	  AccountSuspendedException, SendingPausedException unavailable (sender)
//	paceAnswers: ThrottlingException, TooManyRequestsException,
//	  LimitExceededException, Throttling, any 429       throttled (connect): a pace, nothing taken
//	  … "Daily message quota exceeded."                 throttled, Pause QuotaPause
//	credentials, signature, access (403, 401)           unavailable (auth)
//	BadRequestException naming the recipient and not MAIL_FROM
//	                                                    permanent (recipient)
//	BadRequestException naming MAIL_FROM                unavailable (sender)
//	BadRequestException, anything else ("Illegal address" naming none,
//	  a message too large, …)                           temporary (data): this message,
//	                                                    retried until DELIVERY_MAX_AGE
//	InternalFailure, 5xx                                ambiguous if written (it may have sent), else unavailable
//	any other 4xx                                       temporary (data)
//
// from and to are the message's sender and recipient addresses; ex is
// nil, and they are "", for a request that carries no message (the
// probe).
func classifySend(err error, ex *httpprovider.Exchange, from, to string) *mail.SendError {
	se := &mail.SendError{Err: fmt.Errorf("ses: %w", err)}
	if ex != nil {
		se.HandedOver = ex.HandedOver()
		if r := ex.Refused(); r != nil {
			se.Outcome, se.Stage, se.Err, se.HandedOver = mail.OutcomeAborted, mail.StageData, r, false
			return se
		}
	}
	var api smithy.APIError
	var res *awshttp.ResponseError
	status := 0
	if errors.As(err, &res) && res.Response != nil && res.Response.Response != nil {
		status = res.HTTPStatusCode()
		se.Reply, se.Header = mail.HTTPStatus(status), res.Response.Header
	}
	set := func(o mail.Outcome, s mail.Stage) *mail.SendError {
		se.Outcome, se.Stage = o, s
		return se
	}
	if !errors.As(err, &api) || status == 0 {
		if ex != nil && ex.Wrote() {
			return set(mail.OutcomeAmbiguous, mail.StageData)
		}
		return set(mail.OutcomeUnavailable, mail.StageConnect)
	}
	code, msg := api.ErrorCode(), strings.ToLower(api.ErrorMessage())
	switch {
	case code == "MessageRejected" && strings.Contains(msg, "not verified"):
		// "Email address is not verified. The following identities
		// failed the check in region EU-WEST-1: <addresses>": ours, or,
		// in the sandbox, the recipient.
		if to != "" && strings.Contains(msg, strings.ToLower(to)) && (from == "" || !strings.Contains(msg, strings.ToLower(from))) {
			return set(mail.OutcomePermanent, mail.StageRecipient)
		}
		return set(mail.OutcomeUnavailable, mail.StageSender)
	case code == "MessageRejected":
		return set(mail.OutcomeTemporary, mail.StageData)
	case code == "MailFromDomainNotVerifiedException", code == "NotFoundException",
		code == "AccountSuspendedException", code == "SendingPausedException":
		return set(mail.OutcomeUnavailable, mail.StageSender)
	case paceOf(code, status, msg) >= 0:
		a := paceAnswers[paceOf(code, status, msg)]
		if a.throttle == mail.ThrottleQuota {
			se.Pause = QuotaPause
		}
		se.Throttle = a.throttle
		return set(mail.OutcomeThrottled, mail.StageConnect)
	case status == http.StatusUnauthorized, status == http.StatusForbidden, authCode(code):
		return set(mail.OutcomeUnavailable, mail.StageAuth)
	case code == "BadRequestException" && to != "" && strings.Contains(msg, strings.ToLower(to)) &&
		(from == "" || !strings.Contains(msg, strings.ToLower(from))):
		return set(mail.OutcomePermanent, mail.StageRecipient)
	case code == "BadRequestException" && from != "" && strings.Contains(msg, strings.ToLower(from)):
		return set(mail.OutcomeUnavailable, mail.StageSender)
	case code == "BadRequestException":
		// SES answers it for one message (its size, its content, an
		// address it does not name), not for our account: making every
		// delivery wait for it would let one bad message stop all mail,
		// and failing it for good could fail every delivery over a
		// sender problem.
		return set(mail.OutcomeTemporary, mail.StageData)
	case status >= 500:
		if ex != nil && ex.Wrote() {
			return set(mail.OutcomeAmbiguous, mail.StageData)
		}
		return set(mail.OutcomeUnavailable, mail.StageConnect)
	default:
		return set(mail.OutcomeTemporary, mail.StageData)
	}
}

// A paceAnswer is a row of paceAnswers: an answer of SES's about pace,
// as it documents it.
type paceAnswer struct {
	who     string   // who documents it, and where
	status  int      // its HTTP status, as documented; any 429 is a pace too
	types   []string // its error types (X-Amzn-ErrorType, the SDK's ErrorCode)
	message string   // an example of its message
	words   []string // any of these in the message, in lower case; none: any
	// throttle is the limit it names: a daily quota pauses for
	// QuotaPause.
	throttle mail.Throttle
}

// sesThrottling are the error types SES answers a request beyond its
// limits with: ThrottlingException in its guide and the API's common
// errors, Throttling in the Query API (SES v1, over SMTP "454 Throttling
// failure"), TooManyRequestsException and LimitExceededException among
// SendEmail's errors in the v2 API reference.
var sesThrottling = []string{"ThrottlingException", "Throttling", "TooManyRequestsException", "LimitExceededException"}

// paceAnswers are SES's refusals for pace: not taken, slow down
// (mail.OutcomeThrottled, no attempt counted, no breaker), with the
// limit the message names; the first row that matches decides. Each row
// is checked against sestest (TestEveryPaceAnswer).
var paceAnswers = []paceAnswer{
	{who: "Amazon SES Developer Guide, errors related to the sending quotas: the daily sending quota",
		status: 400, types: sesThrottling, message: "Daily message quota exceeded.", words: []string{"daily message quota"}, throttle: mail.ThrottleQuota},
	{who: "Amazon SES Developer Guide, errors related to the sending quotas: the maximum send rate",
		status: 400, types: sesThrottling, message: "Maximum sending rate exceeded.", words: []string{"maximum sending rate"}, throttle: mail.ThrottleMessages},
	{who: "Amazon SES API v2 reference, SendEmail: TooManyRequestsException, too many requests to the operation",
		status: 429, types: []string{"TooManyRequestsException"}, message: "Too many requests have been made to the operation."},
	{who: "AWS common errors: ThrottlingException, the request denied due to request throttling",
		status: 400, types: []string{"ThrottlingException", "Throttling"}, message: "Rate exceeded"},
	{who: "Amazon SES API v2 reference, SendEmail: LimitExceededException, a limit of the account",
		status: 400, types: []string{"LimitExceededException"}, message: "There are too many instances of the specified resource type."},
}

// paceOf is the row of paceAnswers an answer of error type typ, status
// and message (lower case) is, or -1; a 429 is a pace whatever its type.
func paceOf(typ string, status int, msg string) int {
	for i, a := range paceAnswers {
		if !slices.Contains(a.types, typ) && status != http.StatusTooManyRequests {
			continue
		}
		if len(a.words) == 0 || slices.ContainsFunc(a.words, func(w string) bool { return strings.Contains(msg, w) }) {
			return i
		}
	}
	return -1
}

// QuotaPause is the pause SES's refusal for its daily quota sets. SES
// says no time: its quota is of a rolling 24 hours, so room comes back as
// the oldest sends age out, not at a set hour. An hour is what
// internal/pace cuts any pause to, and what it pauses for the same
// refusal over SES's SMTP interface ("454 Throttling failure: Daily
// message quota exceeded"); then one request asks again.
const QuotaPause = time.Hour

// authCode reports the AWS error codes of credentials, signatures and
// permissions.
func authCode(code string) bool {
	switch code {
	case "UnrecognizedClientException", "InvalidClientTokenId", "InvalidSignatureException", "SignatureDoesNotMatch",
		"IncompleteSignature", "MissingAuthenticationToken", "ExpiredToken", "ExpiredTokenException", "AccessDeniedException",
		"AccessDenied", "NotAuthorized":
		return true
	}
	return false
}
