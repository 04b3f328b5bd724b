package main

import (
	"context"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pubsubflow/pubsubflow"
)

// Schema is the table the example writes: one row per Pub/Sub message,
// keyed by the message id, which the service keeps across redeliveries.
// The primary key is what makes a redelivery harmless.
const Schema = `CREATE TABLE IF NOT EXISTS events (
	message_id   text        PRIMARY KEY,
	body         text        NOT NULL,
	ordering_key text        NOT NULL,
	published_at timestamptz NOT NULL,
	written_at   timestamptz NOT NULL DEFAULT now()
)`

// upsert writes a batch in one statement: the arrays are the batch's
// columns. A row already there (a redelivered message) is left as it is.
const upsert = `INSERT INTO events (message_id, body, ordering_key, published_at)
SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::timestamptz[])
ON CONFLICT (message_id) DO NOTHING`

// Store writes batches of messages to PostgreSQL.
type Store struct {
	Pool *pgxpool.Pool
	// Written, if set, is called with the rows a committed batch inserted
	// (a redelivered batch inserts none).
	Written func(n int64)
}

// Open connects to dsn and creates the table if it is missing.
func Open(ctx context.Context, dsn string) (*Store, error) {
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	if _, err := pool.Exec(ctx, Schema); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres: creating the table: %w", err)
	}
	return &Store{Pool: pool}, nil
}

// Close closes the pool.
func (s *Store) Close() { s.Pool.Close() }

// WriteBatch is the batch handler: one transaction per batch, committed
// before it returns nil, so RunBatches acks only what is committed. A
// message that can never be a row (here: a body that is not UTF-8) is
// nacked on its own and left out; with a dead-letter policy on the
// subscription it ends there after its max delivery attempts. An error
// (the transaction did not commit) nacks the batch's other messages: they
// come back, and the upsert makes the retry harmless.
func (s *Store) WriteBatch(ctx context.Context, ms []*pubsubflow.Message) error {
	ids := make([]string, 0, len(ms))
	bodies := make([]string, 0, len(ms))
	keys := make([]string, 0, len(ms))
	published := make([]time.Time, 0, len(ms))
	for _, m := range ms {
		if !utf8.Valid(m.Data) {
			m.Nack() // a bad row: only it comes back
			continue
		}
		ids = append(ids, m.ID)
		bodies = append(bodies, string(m.Data))
		keys = append(keys, m.OrderingKey)
		published = append(published, m.PublishTime)
	}
	if len(ids) == 0 {
		return nil
	}
	tx, err := s.Pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx) // a no-op after Commit
	tag, err := tx.Exec(ctx, upsert, ids, bodies, keys, published)
	if err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	if s.Written != nil {
		s.Written(tag.RowsAffected())
	}
	return nil
}
