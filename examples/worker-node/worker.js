#!/usr/bin/env node
// toolbus category host "crm" in Node.js: serves the crm tools as the NATS
// micro service toolbus-crm, beside any toolbus node. See README.md.

import { parseArgs } from "node:util";
import { connect } from "@nats-io/transport-node";

import { Host } from "./host.js";
import { CATEGORY, newStore, tools } from "./crm.js";

const usage = `usage: node worker.js [flags]

Serves the toolbus tool category "crm" as the NATS micro service toolbus-crm.

Flags (each defaults to the environment variable named):
  --server URL      NATS server(s), comma-separated (NATS_URL, default nats://127.0.0.1:4222);
                    a URL may carry user:password@
  --user USER       user (NATS_USER)
  --password PASS   password (NATS_PASSWORD)
  --name NAME       the worker's name: service metadata "node" (WORKER_NAME, default node-worker)
  -h, --help        show this help
`;

/** log writes one line per record to stderr: time, level, message, fields. */
const log = Object.fromEntries(["debug", "info", "warn", "error"].map((level) => [level, (msg, fields = {}) => {
  const kv = Object.entries(fields).map(([k, v]) => `${k}=${/[\s"=]/.test(String(v)) ? JSON.stringify(String(v)) : v}`);
  process.stderr.write(`time=${new Date().toISOString()} level=${level.toUpperCase()} msg=${JSON.stringify(msg)}${kv.length ? " " + kv.join(" ") : ""}\n`);
}]));

function config(argv, env) {
  const { values } = parseArgs({
    args: argv,
    options: {
      server: { type: "string", short: "s" },
      user: { type: "string" },
      password: { type: "string" },
      name: { type: "string" },
      help: { type: "boolean", short: "h" },
    },
    strict: true,
  });
  if (values.help) {
    process.stdout.write(usage);
    process.exit(0);
  }
  let user = values.user ?? env.NATS_USER ?? "";
  let pass = values.password ?? env.NATS_PASSWORD ?? "";
  // nats.js takes no credentials from a URL: move them to user and pass.
  const servers = (values.server ?? env.NATS_URL ?? "nats://127.0.0.1:4222").split(",").map((s) => s.trim()).filter(Boolean).map((s) => {
    const u = new URL(s.includes("://") ? s : `nats://${s}`);
    if (u.username) {
      user ||= decodeURIComponent(u.username);
      pass ||= decodeURIComponent(u.password);
      u.username = "";
      u.password = "";
    }
    return `${u.protocol}//${u.host}`;
  });
  const name = values.name ?? env.WORKER_NAME ?? "node-worker";
  return { servers, user, pass, name };
}

async function main() {
  let cfg;
  try {
    cfg = config(process.argv.slice(2), process.env);
  } catch (err) {
    process.stderr.write(`${err.message}\n\n${usage}`);
    process.exit(2);
  }
  let nc;
  try {
    nc = await connect({
      servers: cfg.servers,
      ...(cfg.user ? { user: cfg.user, pass: cfg.pass } : {}),
      name: `toolbus-host-${CATEGORY}@${cfg.name}`,
      maxReconnectAttempts: -1, // ride out a node restart
    });
  } catch (err) {
    throw new Error(`connect to ${cfg.servers.join(",")}${cfg.user ? ` as ${cfg.user}` : ""}: ${err.message}`);
  }
  (async () => {
    for await (const s of nc.status()) {
      if (s.type === "disconnect" || s.type === "reconnect" || s.type === "error") {
        log.warn("connection", { status: s.type, server: s.server ?? "", err: s.error?.message ?? "" });
      }
    }
  })().catch(() => {});

  const host = new Host({ nc, category: CATEGORY, node: cfg.name, tools: tools(newStore()), log });
  const svc = await host.start();
  log.info("worker ready", { service: svc.info().name, id: svc.info().id, server: nc.getServer(), node: cfg.name });

  let stopping = false;
  // shutdown stops the host and drains the connection, then exits with code.
  const shutdown = async (why, code) => {
    if (stopping) return;
    stopping = true;
    log.info("stopping", { why });
    // Whatever hangs, the process ends.
    setTimeout(() => {
      log.error("did not stop in time; exiting");
      process.exit(1);
    }, 15_000).unref();
    try {
      await host.stop();
      if (!nc.isClosed()) await nc.drain();
    } catch (err) {
      log.warn("stop", { err: err?.message ?? String(err) });
    }
    log.info("stopped");
    process.exit(code);
  };
  process.on("SIGTERM", () => void shutdown("SIGTERM", 0));
  process.on("SIGINT", () => void shutdown("SIGINT", 0));

  // The service stops by itself when one of its subscriptions fails (a
  // permissions violation, say) or the connection closes: a host that
  // serves nothing must not linger.
  svc.stopped.then((err) => {
    if (!stopping) {
      log.error("the micro service stopped", { err: err?.message ?? "" });
      void shutdown("the micro service stopped", 1);
    }
  });
  nc.closed().then((err) => {
    if (!stopping) {
      log.error("connection closed", { err: err?.message ?? "" });
      void shutdown("the connection closed", 1);
    }
  });
}

main().catch((err) => {
  log.error("worker failed", { err: err?.message ?? String(err) });
  process.exit(1);
});
