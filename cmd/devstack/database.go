package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// ping connects to the database of url and closes the connection.
func ping(ctx context.Context, url string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	return conn.Close(ctx)
}

// createRoleAndDatabase makes, through adminURL, the role of dbURL (with
// its password, able to log in) and its database, owned by that role,
// whichever of the two is missing. It says what it made.
func createRoleAndDatabase(ctx context.Context, adminURL, dbURL string) (string, error) {
	cfg, err := pgx.ParseConfig(dbURL)
	if err != nil {
		return "", fmt.Errorf("DATABASE_URL: %w", err)
	}
	if cfg.User == "" || cfg.Database == "" {
		return "", errors.New("DATABASE_URL names no user or no database")
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return "", err
	}
	defer func() { _ = admin.Close(ctx) }()
	role, db := pgx.Identifier{cfg.User}.Sanitize(), pgx.Identifier{cfg.Database}.Sanitize()
	var made []string
	var exists bool
	if err := admin.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1)", cfg.User).Scan(&exists); err != nil {
		return "", err
	}
	if !exists {
		// CREATE ROLE takes no parameters: the password is a quoted literal.
		password := "'" + strings.ReplaceAll(cfg.Password, "'", "''") + "'"
		if _, err := admin.Exec(ctx, "CREATE ROLE "+role+" LOGIN PASSWORD "+password); err != nil {
			return "", err
		}
		made = append(made, "role "+cfg.User)
	}
	if err := admin.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", cfg.Database).Scan(&exists); err != nil {
		return "", err
	}
	if !exists {
		if _, err := admin.Exec(ctx, "CREATE DATABASE "+db+" OWNER "+role); err != nil {
			return "", err
		}
		made = append(made, "database "+cfg.Database)
	}
	if len(made) == 0 {
		return "", errors.New("the role and the database exist: the role's password, or pg_hba.conf, refuses it")
	}
	return strings.Join(made, " and "), nil
}
