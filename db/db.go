// Package db holds the SQL that defines and queries the service's schema:
// goose migrations, embedded here so that every binary carries them, and
// the sqlc query files that generate internal/dbsqlc.
package db

import "embed"

// Migrations are the goose migrations in db/migrations.
//
//go:embed migrations/*.sql
var Migrations embed.FS
