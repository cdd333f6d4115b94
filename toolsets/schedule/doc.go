// Package schedule holds the tools of the "schedule" category and their store: an
// agent's turns that fire later or again (at a time, every interval, or on a cron
// expression), kept as JetStream message schedules (Nats-Schedule) that publish into
// the turn intake, with the bounds the server accepts and a cron reader that agrees
// with the server's.
package schedule
