// Package workflow is the workflow category (workflow_start, workflow_view,
// workflow_list, workflow_cancel, in main turns only) and the engine behind it: a
// workflow is tasks that each run as isolated task turns and end by submitting a result
// that passes the task's JSON Schema, checked by the provider (submit_result is sent
// strict), by the turn, and once more here against the schema persisted with the
// workflow before the result is written. State lives in the JetStream KV bucket
// bus.BucketWorkflows; task turns go through the turn intake, so any node runs them.
// engine.go says how a workflow moves on exactly once across nodes.
package workflow
