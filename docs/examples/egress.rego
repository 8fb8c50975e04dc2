# An egress policy for the appliance's worker (docs/worker.md, "Egress: fetch behind a policy").
#
# Every fetch() of every script, and every redirect hop it follows, is decided here before
# anything leaves the worker: the worker evaluates data.appliance.egress for the request and
# sends it only when `allow` is exactly true. Anything else denies: an allow that is false,
# undefined or not a boolean, a rule that fails (two rules giving `reason` different values is
# such a failure), or a decision slower than egress.policy_timeout_ms. `reason`, when the request
# is denied, is what the script's TypeError and the attempt's record say.
#
# The input (all names lower-case):
#   input.method            "POST"
#   input.url               "https://hooks.example.com/hooks/build?ref=main"
#   input.url_parsed        {"scheme", "host", "port", "path", "query"}
#   input.headers           {"content-type": "...", "idempotency-key": "...", ...}
#                           as sent, except credentials (the policy never sees their values)
#   input.body_bytes        17
#   input.addresses         ["93.184.216.34"]  the addresses the connection may use, and only them
#   input.addresses_global  true when every one is a public unicast address
#   input.credentials       ["HOOK_TOKEN"]     names of the credentials the worker will attach
#   input.redirect          null, or {"hop": 1, "from": "https://..."} for a followed redirect
#   input.invocation        {"namespace", "schedule_id", "schedule_name", "occurrence_id",
#                            "attempt", "ownership_epoch"}
#
# Try it before deploying: the worker refuses to start on a module that does not load, naming
# the file and line; `opa eval -d egress.rego -i request.json data.appliance.egress` shows a
# decision (rego-cpp, the worker's evaluator, has no net.* built-ins: use input.addresses_global
# or string prefixes for addresses).
package appliance.egress

import rego.v1

# What scripts may call: host -> methods and path prefixes. Everything else is denied.
apis := {
	"hooks.example.com": {"methods": {"POST"}, "paths": ["/hooks/"]},
	"api.example.com": {"methods": {"GET", "POST"}, "paths": ["/v1/reports/", "/v1/status"]},
}

# Schedules allowed to write (POST) anywhere on the list; the others may only read.
writers := {"nightly-report", "deploy-hook"}

default allow := false

allow if {
	input.url_parsed.scheme == "https"
	api := apis[input.url_parsed.host]
	input.method in api.methods
	path_listed(api)
	may_write
	# Against SSRF: a listed name that resolves to a private, loopback or link-local address
	# (a hijacked DNS record, a rebinding attempt) is refused. The worker connects only to the
	# addresses checked here.
	input.addresses_global
	input.body_bytes <= 65536
}

path_listed(api) if {
	some prefix in api.paths
	startswith(input.url_parsed.path, prefix)
}

may_write if input.method == "GET"

may_write if input.invocation.schedule_name in writers

# One reason, chosen in order, only when denied.
reason := why if not allow

why := "only https URLs may be fetched" if {
	input.url_parsed.scheme != "https"
} else := sprintf("%s is not an API scripts may call", [input.url_parsed.host]) if {
	not apis[input.url_parsed.host]
} else := sprintf("%s is not allowed on %s", [input.method, input.url_parsed.host]) if {
	not input.method in apis[input.url_parsed.host].methods
} else := sprintf("%s is not a listed path", [input.url_parsed.path]) if {
	not path_listed(apis[input.url_parsed.host])
} else := "this schedule may only read (GET)" if {
	not may_write
} else := "the host resolves to a non-public address" if {
	not input.addresses_global
} else := "the body is larger than 64 KiB" if {
	input.body_bytes > 65536
} else := "denied"
