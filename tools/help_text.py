"""The words of ``discovery-sync --help``: each command's description and examples, the spec format."""

from __future__ import annotations

PROG = "discovery-sync"

MAIN = """\
Look into a discovery store (file, etcd or Kubernetes) and change it by hand.

Read-only commands (list, get, watch, doctor, gc --dry-run) never write: no lease, no
Kubernetes resource, no store directory is created. A file store that does not exist (a
mistyped path) is an error for list, get, watch, top and gc, which create nothing; register
creates it. Global options (--url, --timeout, -o/--output) may come before or after the command.

Output: aligned tables, on a terminal and piped alike (-o wide adds columns); -o json for
JSON lines, -o yaml for YAML. Characters a terminal would act on (escape sequences, CR,
bidi controls) are shown escaped. Without --url, each command says on a terminal which
store the environment chose. Records are keyed by their store key, {bucket}/{id path},
and instance ids are shown in hex, as the keys hold them; JSON output keeps the records'
wire format (ids as decimal integers there) and adds each id as the table shows it,
instance_id_hex (publisher_id_hex for event sources): readers that take numbers as
doubles (jq 1.6, JavaScript) round ids above 2**53. There is no AGE column: no backend keeps
when a record was created (a file's mtime is its heartbeat, etcd revisions are not
times, a Kubernetes resource is per worker, not per record).

No shell completion is shipped (it would need a dependency)."""

MAIN_EXAMPLES = f"""\
examples:
  {PROG} list                              every record of the default store
  {PROG} --url etcd://10.0.0.5:2379 list --kind models
  {PROG} list -o json | jq -r .instance_id_hex
  {PROG} get v1/instances/ns/backend/generate/1f2e3d4c5b6a7988
  {PROG} watch --namespace ns              one line per change
  {PROG} doctor                            what is wrong with the store, and what to do
  {PROG} manifests | kubectl apply -f -    the CRD and RBAC the kube backend needs
  python -m discovery_sync --version"""

URL_HELP = (
    "store URL: file:///path, etcd://host:port[,host:port], kube://, memory://name "
    "(default: from DYN_DISCOVERY_BACKEND, DYN_FILE_KV, ETCD_ENDPOINTS)"
)
TIMEOUT_HELP = (
    "seconds to wait for connecting and for each request to the store (default: %(default)s; "
    "options given in the URL win)"
)
OUTPUT_HELP = "output format: table (the default, piped too), wide, json (JSON lines) or yaml"

KIND_HELP = "which records: all, endpoints, models, event_channels or event_sources (singular forms work too)"
SCOPE_HELP = """event scope as JSON, e.g. '{"kind": "namespace", "name": "ns"}' (event channels and sources)"""

LIST = """\
Print the records that match: endpoints, model cards, event channels and event sources.

Columns: KIND; WHERE (namespace/component/endpoint for endpoints and models, with a
model card's suffix in parentheses; scope and topic for event channels and sources); ID
(the instance id in hex, as in store keys); TRANSPORT. -o wide adds the model name and
the store key. --namespace/--component/--endpoint select endpoints and models,
--scope/--topic event channels and sources; with --kind all each kind is shown only if
the filters given apply to it."""

LIST_EXAMPLES = f"""\
examples:
  {PROG} list
  {PROG} list --kind models --namespace dynamo -o wide
  {PROG} list --kind event_channels --scope '{{"kind": "namespace", "name": "dynamo"}}'
  {PROG} list -o json > records.jsonl"""

GET = """\
Print one record, given the ID list shows (the instance id in hex, or enough of its first
digits to name one record), its id path (namespace/component/endpoint/ID, ID a prefix too;
a model card's suffix may follow), or its store key ({bucket}/{id path}, as list -o wide
shows it). A worker's endpoint and model card share its id: --kind chooses between them.
An id that names several records is an error listing them. Exit status 1 when there is no
such record."""

GET_EXAMPLES = f"""\
examples:
  {PROG} get 1f2e3d4c5b6a7988 --kind endpoints
  {PROG} get 1f2e --kind models -o json
  {PROG} get dynamo/backend/generate/1f2e3d4c5b6a7988/my-lora
  {PROG} get v1/instances/dynamo/backend/generate/1f2e3d4c5b6a7988"""

WATCH = """\
Follow changes of one kind of record (default: endpoints). A watch first reports every
matching record (ADDED), then RESYNC with the whole set, then each change as it happens.
Each event is a line: time, event, store key and a summary (-o json: a JSON line each).
--live instead redraws a table of the current records on every change (piped, it prints
each table in turn; -o json: one JSON line per change, {"version": N, "instances": [...]}).
--timeout bounds each request, not the watch: --count or --idle-timeout end it.

A change of the connection to the store is a line of its own: time, SUSPENDED, LOST or
RECONNECTED, and why (-o json: {"state": "suspended", "previous": "connected", "reason": ...,
"rewritten": [...]}; --live: in the heading, piped a line between the tables). After an
outage the watch shows what changed meanwhile, then RESYNC: records that did not change are
not shown again. A file store that does not exist is an error (check the path).

One watch follows one kind: run one per kind to follow several."""

WATCH_EXAMPLES = f"""\
examples:
  {PROG} watch
  {PROG} watch --kind models --namespace dynamo
  {PROG} watch --live --kind endpoints
  {PROG} watch --count 1 -o json            the initial state, then exit
  {PROG} watch --idle-timeout 10            stop after 10 s without a change"""

TOP = """\
Show the metrics of a client of the store, live: a read-only client watches one kind of
record (default: endpoints; the filters narrow it) and its own metrics are redrawn every
--interval seconds: events delivered by kind, Resyncs, open and lagging watches, queue
depths, connection state and its changes, failed writes, crashed or restarted threads, and
what its backend measures (file: rescans and their durations, records swept; the
heartbeat of a writer). Piped, each round is printed as a table after the last; -o json
or -o yaml print the metrics mapping itself, one document per round (client.metrics() in
Python; Prometheus names: discovery_sync.metrics). --count ends it after that many rounds."""

TOP_EXAMPLES = f"""\
examples:
  {PROG} top
  {PROG} top --kind models --namespace dynamo --interval 5
  {PROG} top --count 3 -o json              three rounds as JSON lines, then exit"""

REGISTER = """\
Register the record(s) described by a JSON spec file (- for stdin) and hold them until
Ctrl-C (exit status 130, as for any Ctrl-C; SIGTERM: 0), or remove them at once with
--no-hold. The file holds one spec, or a list of them.

A spec is a record without its instance id (this client fills in its own), tagged by
"type". One of each kind:

  {"type": "Endpoint", "namespace": "dynamo", "component": "backend",
   "endpoint": "generate", "transport": {"tcp": "10.0.0.7:9000/generate"},
   "request_plane_codec": "msgpack"}
      transport: {"tcp": "host:port/..."}, {"http": "URL"} or {"nats_tcp": "subject"};
      optional: device_type (any JSON), request_plane_codec (json or msgpack)

  {"type": "Model", "namespace": "dynamo", "component": "backend",
   "endpoint": "generate", "card_json": {"display_name": "Qwen/Qwen3-0.6B"},
   "model_suffix": "my-lora"}
      card_json: the model deployment card (needs display_name); model_suffix: optional,
      for LoRA or other suffixed cards, without '/' (reference workers use the LoRA
      name's slug: lowercase, characters other than a-z, 0-9, - and _ as _)

  {"type": "EventChannel", "scope": {"kind": "namespace", "name": "dynamo"},
   "topic": "kv-events", "transport": {"kind": "Zmq", "config":
   {"endpoint": "tcp://10.0.0.7:5557"}}}
      transport kinds: Nats {"subject_prefix"}, Zmq {"endpoint"},
      ZmqBroker {"xsub_endpoints": [...], "xpub_endpoints": [...]}

  {"type": "EventSource", "scope": {"kind": "component", "namespace": "dynamo",
   "component": "backend"}, "topic": "kv-events", "publisher_id": 42,
   "metadata": {"zone": "a"}}
      publisher_id: the publisher's own id (an integer); metadata: optional JSON object

Scopes: {"kind": "namespace", "name": NS}, {"kind": "component", "namespace": NS,
"component": C} or {"kind": "endpoint", "endpoint": {"namespace": NS, "component": C,
"name": E}}."""

REGISTER_EXAMPLES = f"""\
examples:
  {PROG} register spec.json                 hold until Ctrl-C
  echo '{{"type": "Endpoint", "namespace": "ns", "component": "c", "endpoint": "e",
        "transport": {{"tcp": "127.0.0.1:9000"}}}}' | {PROG} register -
  {PROG} register --no-hold specs.json      check that they register, then remove them"""

DOCTOR = """\
Check the store and say what is wrong and what to do: one line per check, "ok" or
"PROBLEM". -o json prints the full report as one JSON document. Exit status 1 when there
are problems. Read-only: it writes nothing."""

DOCTOR_EXAMPLES = f"""\
examples:
  {PROG} doctor
  {PROG} --url etcd://10.0.0.5:2379 doctor --timeout 2
  {PROG} doctor -o json | jq .problems"""

GC = """\
Remove the records whose owners died (file store: the owner stopped its heartbeat for a
TTL plus the mount's cache window, so this waits that long; a progress line shows it on a
terminal). Stores with leases (etcd, Kubernetes) remove such records themselves.
--dry-run only lists what would be removed, and writes nothing. Exit status 1 when dead
records were left behind. A file store that does not exist is an error: gc creates nothing."""

GC_EXAMPLES = f"""\
examples:
  {PROG} gc --dry-run
  {PROG} --url file:///srv/discovery gc
  {PROG} gc -o json"""

MANIFESTS = """\
Print the Kubernetes manifests the kube:// backend needs: the DynamoWorkerMetadata
CustomResourceDefinition (--crd) and the RBAC role and binding of its workers (--rbac);
both by default, as YAML documents separated by --- (-o json: one JSON line per object).
Apply the CRD once per cluster and
the RBAC in each namespace the workers run in (kubectl apply -n NAMESPACE; its RoleBinding
names the service account "default": edit it if the worker pods run as another)."""

MANIFESTS_EXAMPLES = f"""\
examples:
  {PROG} manifests --crd | kubectl apply -f -
  {PROG} manifests --rbac > rbac.yaml
  {PROG} manifests -o json | jq .kind"""

DEMO = "Run a short live demo on a temporary file store: one client registers, another watches."
DEMO_EXAMPLES = f"""\
examples:
  {PROG} demo"""

BENCH = """\
Measure the file backend and print the numbers as one JSON object. The benchmarks that
need the test suite's rigs run from a repository checkout (python -m benchmarks.etcd,
python -m benchmarks.interop)."""
BENCH_EXAMPLES = f"""\
examples:
  {PROG} bench --events 200 --records 1000
  {PROG} bench --dir /mnt/nfs/bench"""
