package notify

import (
	"errors"

	"github.com/sekali-dev/sekali/internal/mail"
)

// sendErrorOf returns the classification of err, treating an unclassified
// error as ambiguous: when in doubt, do not send again.
func sendErrorOf(err error) *mail.SendError {
	var se *mail.SendError
	if errors.As(err, &se) {
		return se
	}
	return &mail.SendError{Outcome: mail.OutcomeAmbiguous, Stage: mail.StageData, Err: err}
}
