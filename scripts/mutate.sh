#!/usr/bin/env bash
# Mutation testing: does the suite notice when an important feature breaks? Each mutation below is one
# textual change to one line of the source (a policy that ignores loads, a breaker that never opens, a
# ticket whose signature is not checked, a hop-by-hop header that is forwarded, ...). The script copies the
# working tree into a scratch directory with its own build, then for each mutation: applies it, builds the
# named targets, runs the named tests, and restores the file. A mutation "survives" when every named test
# still passes: the tests cannot see that feature break. The script exits 1 and lists the survivors then.
#
#   scripts/mutate.sh [-l] [NAME-REGEX]
#
#   -l          list the mutations and exit
#   NAME-REGEX  run only the mutations whose name matches (grep -E)
#
# Environment: PDR_MUTATE_DIR (the scratch directory, default build-mutate in the repository, kept between
# runs so that only what changed is rebuilt), JOBS (build and ctest parallelism, default nproc),
# PDR_MUTATE_BASELINE=0 (skip the first run of the named tests on the unmutated tree, which otherwise must
# pass before any mutation is judged).
# Slow (a build and a few integration tests per mutation): not part of CI; run it before calling a feature
# done, and add a test for each survivor.
#
# Each mutation is one line of five fields separated by " @@ ":
#   name @@ file @@ exact text (must occur exactly once in the file) @@ replacement @@ cmake targets @@ tests
# where tests is a ctest -R regular expression. Where the server library hides a mutant from every request
# (h2o accepts only "Transfer-Encoding: chunked" in HTTP/1.1 and takes the field out of the request's headers;
# HTTP/2 refuses the field), a unit test of the rule catches it. A mutation whose text does not occur exactly once, or whose
# tests match nothing, is an error of the list (reported, and the script fails): the list must follow
# the code.
set -u

MUTATIONS=$(cat <<'EOF'
rr_first @@ routing/policies.c @@ size_t i = (start + k) % in->n; @@ size_t i = (start * 0 + k) % in->n; @@ pdrouter @@ ^router_policy_round_robin$
rr_as_random @@ routing/policies.c @@ unsigned start = __atomic_fetch_add(in->rr_next, 1, __ATOMIC_RELAXED); @@ unsigned start = (unsigned)pdr_routing_rng_next(in->rng) + 0 * __atomic_fetch_add(in->rr_next, 1, __ATOMIC_RELAXED); @@ pdrouter @@ ^router_policy_round_robin$
least_load_as_round_robin @@ routing/policies.c @@ {"least_load", P2C_FLAGS, pick_p2c}; @@ {"least_load", P2C_FLAGS, pick_round_robin}; @@ pdrouter @@ ^router_policy_least_load_load$
power_of_two_as_round_robin @@ routing/policies.c @@ {"power_of_two", P2C_FLAGS, pick_p2c}; @@ {"power_of_two", P2C_FLAGS, pick_round_robin}; @@ pdrouter @@ ^router_policy_power_of_two_load$
power_of_two_as_random @@ routing/policies.c @@ {"power_of_two", P2C_FLAGS, pick_p2c}; @@ {"power_of_two", P2C_FLAGS, pick_random}; @@ pdrouter @@ ^router_policy_power_of_two_load$
power_of_two_ignores_load @@ routing/policy.c @@ return (int)(loads[b] < loads[a] ? b : a); @@ return (int)a; @@ pdrouter test_routing @@ ^(routing_unit|router_policy_power_of_two_load)$
power_of_two_most_loaded @@ routing/policy.c @@ return (int)(loads[b] < loads[a] ? b : a); @@ return (int)(loads[b] > loads[a] ? b : a); @@ pdrouter test_routing @@ ^(routing_unit|router_policy_power_of_two_load)$
engine_load_ignored @@ router/workers/pool_load.c @@ *load = corrected(LD(w->engine.reqs), LD(w->engine.inflight_at), inflight); @@ *load = corrected(0 * LD(w->engine.reqs), LD(w->engine.inflight_at), inflight); @@ pdrouter @@ ^router_engine_load_(least_load|power_of_two)
engine_load_failure_as_idle @@ router/fleet/load_poll.c @@ ST(w->engine.state, PDR_ELOAD_FAILED); @@ ST(w->engine.state, PDR_ELOAD_OK); ST(w->engine.reqs, 0); ST(w->engine.inflight_at, (int64_t)pdr_worker_inflight(w)); __atomic_store_n(&w->engine.ok_ms, pdr_now_ms(), __ATOMIC_RELEASE); @@ pdrouter @@ ^router_engine_load_poll_fails$
engine_kv_usage_ignored @@ router/fleet/shim_events_views.c @@ return LOAD(w->engine.kv_usage_ppm) < (int64_t)c->load.kv_usage_max_percent * 10000 ? 1 : 0; @@ return 1; @@ pdrouter @@ ^router_engine_load_kv_usage$
engine_load_prometheus_nan @@ router/util/engine_load.c @@ if (!isfinite(v) || v < 0 @@ if ((0 && !isfinite(v)) || v < 0 @@ test_engine_load @@ ^engine_load_unit$
engine_load_rank_summed @@ router/fleet/load_poll.c @@ pdr_engine_load_parse_sglang(pl->buf, pl->len, w->dp_rank, &l) @@ pdr_engine_load_parse_sglang(pl->buf, pl->len, -1, &l) @@ pdrouter @@ ^router_engine_load_dp_ranks$
random_first @@ routing/policies.c @@ return n > 0 ? (int)idx[pdr_routing_rng_next(in->rng) % n] : PDR_ENOWORKER; @@ return n > 0 ? (int)idx[0] : PDR_ENOWORKER; @@ pdrouter @@ ^router_policy_random$
chash_keyed_by_process_id @@ router/workers/pool.c @@ w->ring_key = pdr_routing_hash(w->target, strlen(w->target)); @@ w->ring_key = w->uid; @@ pdrouter @@ ^router_policy_replicas
chash_first_worker @@ routing/chash.c @@ if (pick < 0 || d < best || (d == best && keys[i] < keys[pick])) { @@ if (pick < 0 || (0 && (d < best || (d == best && keys[i] < keys[pick])))) { @@ pdrouter test_routing @@ ^(routing_unit|router_policy_replicas.*)$
chash_ignores_prompt @@ routing/chash.c @@ uint64_t d = ring_distance(keys[i], key_hash); @@ uint64_t d = ring_distance(keys[i], key_hash * 0); @@ pdrouter test_routing @@ ^(routing_unit|router_policy_replicas.*)$
chash_no_load_bound @@ routing/chash.c @@ uint64_t limit = cap - 1.0 >= 18446744073709551615.0 ? UINT64_MAX : (uint64_t)(cap - 1.0); @@ uint64_t limit = UINT64_MAX; @@ pdrouter test_routing @@ ^(routing_unit|router_policy_replicas.*)$
cache_aware_no_match @@ routing/policy.c @@ if (rate > params->cache_threshold) { @@ if (0 && rate > params->cache_threshold) { @@ pdrouter test_routing @@ ^(routing_unit|router_policy_affinity)$
cache_aware_no_balance @@ routing/policy.c @@ int imbalanced = pdr__loads_imbalanced(params, loads, n); @@ int imbalanced = 0 && pdr__loads_imbalanced(params, loads, n); @@ pdrouter test_routing @@ ^(routing_unit|router_policy_.*)$
cache_aware_smallest_tree_first @@ routing/policy.c @@ if (i == 0 || c < best || (c == best && loads[i] < loads[pick])) { @@ if (i == 0 || (0 && (c < best || (c == best && loads[i] < loads[pick])))) { @@ pdrouter test_routing @@ ^(routing_unit|router_policy_affinity|router_policy_pool_thresholds)$
precise_prefix_ignores_index @@ routing/precise.c @@ rate = (double)m[i].blocks * m[i].block_size / (double)n_tokens; @@ rate = 0.0 * (double)n_tokens; @@ pdrouter test_kvindex @@ ^(routing_unit_kvindex|router_kv_events_routing)$
kvindex_no_namespace @@ routing/kvindex.c @@ uint64_t prev = pdr_kvindex_namespace(adapter, ev->group, ev->kind_hash); @@ uint64_t prev = 0 * pdr_kvindex_namespace(adapter, ev->group, ev->kind_hash); @@ test_kvindex @@ ^routing_unit_kvindex$
kvindex_groups_share_engine_hashes @@ routing/kvindex.c @@ return group == 0 ? ehash : pdr_mix64(ehash ^ ((uint64_t)group * 0x9e3779b97f4a7c15ULL)); @@ return group == 0 || 1 ? ehash : pdr_mix64(ehash ^ ((uint64_t)group * 0x9e3779b97f4a7c15ULL)); @@ test_kvindex @@ ^routing_unit_kvindex$
kv_events_no_replay @@ router/fleet/kv_replay.c @@ if (replay_start(s, (uint64_t)from, seq, payload, len) == 0) @@ if (0 && replay_start(s, (uint64_t)from, seq, payload, len) == 0) @@ pdrouter @@ ^router_kv_events_replay_repaired$
kv_events_replay_too_old_applied @@ router/fleet/kv_replay.c @@ if (seq > rp->next) { @@ if (0 && seq > rp->next) { @@ pdrouter @@ ^router_kv_events_replay_too_old$
kv_events_incarnation_kept @@ router/fleet/kv_events.c @@ if (s != NULL && s->epoch != epoch) { @@ if (0 && s != NULL && s->epoch != epoch) { @@ pdrouter @@ ^router_kv_events_incarnation$
kv_events_model_ignored @@ router/pd/attempt.c @@ tok.model = m->v.p + 1; @@ tok.model = NULL; @@ pdrouter @@ ^router_kv_events_lora$
kv_snapshot_not_loaded @@ router/fleet/kv_snapshot.c @@ rc = pdr_kvindex_import(s->ix, &snap, &n); @@ rc = 0; @@ pdrouter @@ ^router_kv_snapshot_(restart|replica)$
kv_snapshot_no_checksum @@ routing/kvindex_snapshot.c @@ if (want != got) { @@ if (0 && want != got) { @@ pdrouter test_kvsnap @@ ^(routing_unit_kvsnap|router_kv_snapshot_corrupt)$
kv_snapshot_warm_unused @@ routing/kvindex.c @@ out[i].synced = ws[i] != NULL && (ws[i]->st.synced || ws[i]->st.warm); @@ out[i].synced = ws[i] != NULL && ws[i]->st.synced; @@ pdrouter test_kvsnap @@ ^(routing_unit_kvsnap|router_kv_snapshot_restart)$
kv_snapshot_not_saved_at_stop @@ router/fleet/kv_events.c @@ pdr_kv_snapshot_stop(ke->snap); @@ (void)pdr_kv_snapshot_stop; @@ pdrouter @@ ^router_kv_snapshot_restart$
kv_snapshot_parked_not_adopted @@ router/fleet/kv_events.c @@ pdr_kv_snapshot_adopt(ke->snap, ws[i]); @@ (void)ws; @@ pdrouter @@ ^router_kv_snapshot_discovered$
kv_snapshot_parked_wrong_worker @@ routing/kvsnap_park.c @@ if (p->s.entries[i].worker != k) @@ if (p->s.entries[i].worker == k) @@ test_kvsnap @@ ^routing_unit_kvsnap$
kv_snapshot_parked_dropped @@ routing/kvsnap_park.c @@ map[i] = snap->workers[i].id == 0 && snap->workers[i].seen ? (uint32_t)++nw : 0; @@ map[i] = 0; @@ pdrouter test_kvsnap @@ ^(routing_unit_kvsnap|router_kv_snapshot_discovered)$
kv_snapshot_warm_replayed_from_0 @@ router/fleet/kv_replay.c @@ (st.messages == 0 && !st.warm)) @@ st.messages == 0) @@ pdrouter @@ ^router_kv_snapshot_replay$
breaker_never_opens @@ router/workers/breaker.c @@ if (b->state == PDR_BREAKER_CLOSED && consecutive >= c->consecutive_failures) { @@ if (0 && consecutive >= c->consecutive_failures) { @@ pdrouter test_breaker @@ ^(router_unit_breaker|router_breaker_.*)$
breaker_open_admits @@ router/workers/breaker.c @@     if (b->state == PDR_BREAKER_OPEN)
        return 0; @@     if (b->state == PDR_BREAKER_OPEN)
        return 1; @@ pdrouter test_breaker @@ ^(router_unit_breaker|router_breaker_.*)$
breaker_many_probes @@ router/workers/breaker.c @@ if (b->probe && now_ms < b->until_ms) @@ if (0 && b->probe && now_ms < b->until_ms) @@ pdrouter test_breaker @@ ^(router_unit_breaker|router_breaker_.*)$
breaker_no_backoff @@ router/workers/breaker.c @@ uint64_t p = b->period_ms ? b->period_ms * 2 : c->open_ms; @@ uint64_t p = c->open_ms; @@ pdrouter test_breaker @@ ^(router_unit_breaker|router_breaker_.*)$
retry_budget_unlimited @@ router/pd/retry.c @@         if (cur >= limit)
            return 0; @@         if (0 && cur >= limit)
            return 0; @@ pdrouter test_retry @@ ^(router_unit_retry|router_retry_budget)$
retry_budget_ignores_percent @@ router/pd/retry.c @@ uint64_t b = inflight * (uint64_t)(percent > 0 ? percent : 0) / 100; @@ uint64_t b = inflight + 0 * (uint64_t)percent; @@ pdrouter test_retry @@ ^(router_unit_retry|router_retry_budget)$
admission_no_inflight_cap @@ router/fleet/admission.c @@ if (S.admitted >= c->limits.max_inflight) @@ if (0 && S.admitted >= c->limits.max_inflight) @@ pdrouter test_admission @@ ^(router_unit_admission|router_admission_inflight_cap)$
admission_no_pool_cap @@ router/fleet/admission.c @@ if (per_pool > 0 && S.pool_admitted[pool_slot(w->pool_index)] >= per_pool) @@ if (0 && per_pool > 0) @@ pdrouter test_admission @@ ^(router_unit_admission|router_admission_per_pool_cap)$
admission_no_worker_cap @@ router/fleet/admission.c @@ if (!workers_fit(c, w)) @@ if (0 && !workers_fit(c, w)) @@ pdrouter test_admission @@ ^(router_unit_admission|router_admission_per_worker_cap)$
admission_no_rate_limit @@ router/fleet/admission.c @@     if (b->tokens < 1)
        return 0; @@     if (0 && b->tokens < 1)
        return 0; @@ pdrouter test_admission @@ ^(router_unit_admission|router_admission_rate_limit)$
admission_queue_unbounded @@ router/fleet/admission.c @@ } else if (S.depth >= (size_t)c->limits.queue) { @@ } else if (0 && S.depth >= (size_t)c->limits.queue) { @@ pdrouter test_admission @@ ^(router_unit_admission|router_admission_queue_full)$
admission_classes_ignored @@ router/fleet/admission.c @@ w->fq.cls = w->cls; @@ w->fq.cls = 0; @@ pdrouter @@ ^router_admission_fairq_priority$
admission_tenants_ignored @@ router/fleet/admission.c @@ w->fq.key = tag != NULL ? tag->key : 0; @@ w->fq.key = 0; @@ pdrouter @@ ^router_admission_fairq_fair_shares$
admission_never_late @@ router/fleet/admission.c @@ if (!c->admission.refuse_late || S.hold_samples < EST_MIN_SAMPLES || deadline_ns == 0) @@ if (c != NULL) @@ pdrouter @@ ^router_admission_fairq_deadline$
admission_never_shed @@ router/fleet/admission.c @@ } else if (c->admission.shed_queue_depth > 0 && S.depth >= (size_t)c->admission.shed_queue_depth && @@ } else if (0 && c->admission.shed_queue_depth > 0 && @@ pdrouter @@ ^router_admission_fairq_shed$
fairq_no_round_robin @@ router/fleet/fairq.c @@ c->next = (pos + 1) % positions; @@ c->next = c->next; @@ test_fairq pdrouter @@ ^(router_unit_fairq|router_admission_fairq_fair_shares)$
ticket_signature_unchecked @@ common/ticket.c @@ if (!pdr_ct_equal(mac, want, PDR_HMAC_LEN)) @@ if (0 && !pdr_ct_equal(mac, want, PDR_HMAC_LEN)) @@ pdrouter pdsim test_ticket pdshim @@ ^(ticket_unit|tickets_refusals|tickets_shim_python)$
ticket_expiry_unchecked @@ common/ticket.c @@ else if (out->expires_ms < UINT64_MAX - skew_ms && now_ms > out->expires_ms + skew_ms) @@ else if (0 && now_ms > out->expires_ms + skew_ms) @@ pdrouter pdsim test_ticket pdshim @@ ^(ticket_unit|tickets_refusals|tickets_shim_python)$
ticket_replay_accepted @@ worker-shim/shim_ticket.c @@         if (s->room == room)
            return PDR_EREPLAYED; @@         if (s->room == room)
            return 0; @@ pdshim @@ ^(tickets_shim_python|tickets_shim_parts_python)$
kv_transfer_ms_ignored @@ router/pd/request.c @@ x->kv.ms = pdr_kv_deadline_ms(x->to.kv_transfer_ms, x->to.kv_transfer_ms_per_1k_tokens, x->kv.tokens); @@ x->kv.ms = 86400000; @@ pdrouter @@ ^router_kv_deadline_(retry_other_pair|no_pair_left)$
kv_transfer_ms_per_1k_ignored @@ router/workers/kvdeadline.c @@ ms += ((uint64_t)per_1k_ms * tokens + 1023) / 1024; @@ ms += 0; @@ pdrouter @@ ^router_kv_deadline_scaled_deadline$
first_byte_ms_ignored @@ router/pd/attempt.c @@ x->at.first_byte_deadline_ns = x->at.t0_ns + (uint64_t)x->to.first_byte_ms * 1000000u; @@ x->at.first_byte_deadline_ns = x->at.t0_ns + 86400000000000u; @@ pdrouter @@ ^router_(prefill_stopped|prefill_stopped_retry|relay_first_byte)$
drain_worker_keeps_serving @@ router/workers/pool_state.c @@ __atomic_store_n(&w->drain, PDR_DRAIN_DRAINING, __ATOMIC_RELEASE); @@ (void)0; @@ pdrouter @@ ^router_admin_(drain_load|drain_timeout|self_drain)$
drain_no_grace @@ router/server/server_shutdown.c @@     if (grace == 0) {
        pdr__server_begin_drain(r); @@     if (1) {
        pdr__server_begin_drain(r); @@ pdrouter @@ ^router_(shutdown|shutdown_load|shutdown_drain_timeout|admin_readiness)$
hop_keep_alive_forwarded @@ router/front/fwdheaders.c @@ : EQ(name, len, "keep-alive") ? K_HOP @@ : EQ(name, len, "keep-alive") ? K_FORWARD @@ pdrouter @@ ^router_headers_(forward|own_rules)$
hop_te_forwarded @@ router/front/fwdheaders.c @@ return EQ(name, len, "te") ? K_HOP : K_FORWARD; @@ return K_FORWARD; @@ pdrouter @@ ^router_headers_forward$
hop_upgrade_trailer_forwarded @@ router/front/fwdheaders.c @@ return EQ(name, len, "trailer") || EQ(name, len, "upgrade") ? K_HOP : K_FORWARD; @@ return K_FORWARD; @@ pdrouter @@ ^router_headers_forward$
hop_proxy_forwarded @@ router/front/fwdheaders.c @@ if (len >= 6 && EQ(name, 6, "proxy-")) @@ if (0) @@ pdrouter @@ ^router_headers_forward$
hop_connection_names_forwarded @@ router/front/fwdheaders.c @@ if (named_by_connection(req, conn_i, name, nlen)) @@ if (0 && named_by_connection(req, conn_i, name, nlen)) @@ pdrouter @@ ^router_headers_forward$
hop_transfer_encoding_forwarded @@ router/front/fwdheaders.c @@ return EQ(name, len, "transfer-encoding")   ? K_HOP @@ return EQ(name, len, "transfer-encoding")   ? K_FORWARD @@ pdrouter test_fwdheaders @@ ^router_(unit_fwdheaders|headers_(forward|own_rules))$
xff_client_not_appended @@ router/front/fwdheaders.c @@     put(&o, addr, addr_len);
    if (req->scheme != NULL) @@     (void)addr_len;
    if (req->scheme != NULL) @@ pdrouter @@ ^router_headers_forward$
xff_client_value_dropped @@ router/front/fwdheaders.c @@ if (e->value.len == 0 || classify(e->name->base, e->name->len, 0) != K_XFF || @@ if (1 || @@ pdrouter @@ ^router_headers_forward$
xfp_client_value_forwarded @@ router/front/fwdheaders.c @@ : EQ(name, len, "x-forwarded-proto") ? K_ROUTER @@ : EQ(name, len, "x-forwarded-proto") ? K_FORWARD @@ pdrouter @@ ^router_headers_(forward|own_rules)$
xfh_not_added @@ router/front/fwdheaders.c @@ if (xfh == NULL && authority.len > 0) @@ if (0 && xfh == NULL && authority.len > 0) @@ pdrouter @@ ^router_headers_forward$
client_authorization_forwarded @@ router/front/fwdheaders.c @@ return api_key && EQ(name, len, "authorization") ? K_ROUTER : K_FORWARD; @@ return 0 && api_key ? K_ROUTER : K_FORWARD; @@ pdrouter @@ ^router_headers_api_key$
h2_closed_socket_read @@ router/front/conn_h2.c @@ return sock->input == NULL || uv_is_closing((uv_handle_t *)&cc->tcp); @@ return 0 && uv_is_closing((uv_handle_t *)&cc->tcp); @@ pdrouter fuzz_conn @@ ^(router_h2_conformance_prior|router_conn_fuzz_corpus)$
tls_reset_not_quiet @@ router/front/conn_internal.h @@         SSL_set_quiet_shutdown(cc->ssl, 1); @@         (void)0; @@ pdrouter @@ ^router_tls_descriptors$
lingering_skipped @@ router/front/conn_h1.c @@ if (c->timeouts.lingering_ms == 0 || linger_drop(cc, sock)) { @@ if (1 || linger_drop(cc, sock)) { @@ pdrouter @@ ^router_limits_early_answers$
h2_body_budget_off @@ router/front/conn_h2.c @@ cc->h2g.budget_on = b != UINT64_MAX; @@ cc->h2g.budget_on = 0; @@ pdrouter @@ ^router_limits_h2_body_budget$
h2_body_stall_ignored @@ router/front/conn_h2.c @@ if ((s = pdr_h2guard_take_stalled(&cc->h2g, now - pause)) == 0) @@ if ((s = 0) == 0) @@ pdrouter @@ ^router_limits_h2_body_budget$
h2_slow_reader_whole_sends @@ router/pd/relay.c @@ if (x->req->version >= 0x200 && n > H2_PIECE) @@ if (0 && x->req->version >= 0x200 && n > H2_PIECE) @@ pdrouter @@ ^router_hardening_slow_steady_reader_h2$
merge_stream_no_send_ceiling @@ router/pd/relay.c @@ if (out->len >= HIGH_WATER && start < len) { @@ if (0 && out->len >= HIGH_WATER && start < len) { @@ pdrouter @@ ^router_hardening_merge_stream_burst$
merge_event_no_ceiling @@ router/pd/relay.c @@ rc = dump_json(j, out, was + limit - 2 < cap ? was + limit - 2 : cap); @@ rc = dump_json(j, out, cap); @@ pdrouter @@ ^router_hardening_merge_event_past_limit$
merge_whole_no_ceiling @@ router/pd/relay.c @@ rc = dump_json(j, &m, (size_t)x->conf->limits.max_merge_bytes); @@ rc = dump_json(j, &m, (size_t)1 << 40); @@ pdrouter @@ ^router_hardening_merge_event_past_limit$
h2_tls_budget_not_closing @@ router/front/conn_h2.c @@ cc->h2g.budget_closes = !body_limit; @@ cc->h2g.budget_closes = 0; @@ pdrouter @@ ^router_tls_h2_body_budget$
tls_resume_failure_not_retried @@ router/upstream/upstream.c @@ int resumed_failed = c->tls != NULL && c->tls_offered && !c->tls_ready && c->o->tls_no_resume; @@ int resumed_failed = 0; @@ pdrouter @@ ^router_tls_workers_resumption$
tls_resume_failure_keeps_sessions @@ router/upstream/upstream_conn_tls.c @@ if (c->tls_saved || c->tls == NULL || c->o->tls_no_resume) @@ if (c->tls_saved || c->tls == NULL) @@ pdrouter @@ ^router_tls_workers_resumption$
compat_filter_ignored @@ router/workers/pool_pick.c @@ if (filter != NULL && !pdr_pick_filter_ok(filter, pdr_worker_compat_key(v))) @@ if (0 && filter != NULL) @@ pdrouter @@ ^router_compat_pairs_.*$
compat_no_reread @@ router/fleet/health.c @@ pdr_identify_forget(r, w, "healthy again: re-reading"); @@ (void)w; @@ pdrouter @@ ^router_compat_pairs_restarted$
compat_no_repick @@ router/pd/attempt.c @@ !pdr__pd_compat_repick(x, text, tlen, &tok, davoid, dn); @@ 1; @@ pdrouter @@ ^router_compat_pairs_rolling_upgrade$
compat_no_epoch_reread @@ router/fleet/identify.c @@ if (epoch != w->ident.epoch && w->ident.id.key != 0) @@ if (0 && epoch != w->ident.epoch) @@ pdrouter @@ ^router_compat_pairs_shim_restart$
h2_budget_no_eviction @@ router/front/conn_h2.c @@ uv_timer_start(&cc->t->h2_evict_timer, on_h2_evict, 0, 0); @@ (void)on_h2_evict; @@ pdrouter @@ ^router_(limits|tls)_h2_body_budget$
h2_eviction_smallest_first @@ router/front/reqguard.c @@ (big == NULL || b->bytes > big->bytes || (b->bytes == big->bytes && b->last_ms < big->last_ms))) @@ (big == NULL || b->bytes < big->bytes || (b->bytes == big->bytes && b->last_ms < big->last_ms))) @@ pdrouter @@ ^router_limits_h2_body_budget$
h2_eviction_stops_early @@ router/front/conn_h2.c @@ while (__atomic_load_n(&t->r->body_bytes_held, __ATOMIC_RELAXED) > target) { @@ while (__atomic_load_n(&t->r->body_bytes_held, __ATOMIC_RELAXED) > cap) { @@ pdrouter @@ ^router_limits_h2_body_budget$
ng2_lower_stream_id_ignored @@ router/front/conn_ng2_limits.c @@ if (nghttp2_session_find_stream(ng, hd->stream_id) != NULL) @@ if (1) @@ pdrouter @@ ^router_h2_conformance_(prior|tls|admin)_nghttp2$
ng2_no_control_bucket @@ router/front/conn_ng2_limits.c @@ return c->ctl_tokens < 0; @@ return 0; @@ pdrouter @@ ^router_h2_conformance_floods_nghttp2$
ng2_streams_not_queued @@ router/front/conn_ng2.c @@ if (s->conn->running >= s->conn->max_running) { /* limits.h2_max_concurrent_streams */ @@ if (0) { @@ pdrouter @@ ^router_h2_conformance_streams_nghttp2$
engine_abort_never_sent @@ router/pd/release.c @@ x->at.ops->abort(x, prefill); /* cancelled: its worker may still run it */ @@ (void)0; @@ pdrouter pdsim @@ ^router_abort_(client_leaves|decode_fails|hung_endpoint|vllm_closed)$
engine_abort_ignores_switch @@ router/pd/abort.c @@ !x->conf->pd.abort || @@ 0 || @@ pdrouter pdsim @@ ^router_abort_disabled$
engine_abort_wrong_rid @@ router/pd/abort.c @@ send_abort(x, w, role, x->rooms[i]); @@ send_abort(x, w, role, x->rooms[i] + 1); @@ pdrouter pdsim @@ ^router_abort_(client_leaves|decode_fails)$
engine_abort_no_deadline @@ router/pd/abort.c @@ long ms = x->conf->pd.abort_timeout_ms; @@ long ms = 0; @@ pdrouter pdsim @@ ^router_abort_hung_endpoint$
pdsim_abort_ignored @@ tests/sim/routes.c @@ sim__abort(ctx); @@ (void)0; @@ pdrouter pdsim @@ ^router_abort_pdsim_stream$
pdsim_not_autoregressive @@ tests/sim/model.c @@ g->s = digest_step(g->s, tok_hash_of_fill(g->h, g->bpt)); @@ g->s = digest_step(g->s, 0 * tok_hash_of_fill(g->h, g->bpt)); @@ pdsim test_pdsim_model @@ ^pdsim_(resume|unit_model)$
pdsim_no_generation_prompt @@ tests/sim/generate.c @@ if (ct == NULL && add_gen && (r = pdsim_tokenize(t, "assistant", 9)) != 0) @@ if (0 && ct == NULL && add_gen && (r = pdsim_tokenize(t, "assistant", 9)) != 0) @@ pdsim @@ ^pdsim_(resume|integration)$
pdsim_layout_ignored @@ tests/sim/kv_flow.c @@ pdsim_gen_init(&it->gen, pdsim_kv_digest(it->kv, it->toks.n, bpt) ^ sim__state.layout, it->toks.ids, @@ pdsim_gen_init(&it->gen, pdsim_kv_digest(it->kv, it->toks.n, bpt), it->toks.ids, @@ pdrouter pdsim @@ ^router_compat_pairs_bench_rolling_upgrade$
affinity_off @@ router/workers/pool_pick.c @@ if (filter != NULL && filter->affinity != PDR_AFFINITY_OFF) { @@ if (0 && filter != NULL && filter->affinity != PDR_AFFINITY_OFF) { @@ pdrouter test_affinity @@ ^router_(unit_affinity|affinity_.*)$
affinity_never_overloaded @@ router/workers/affinity.c @@ return n > 0 && (double)(inflight + 1) * (double)n > ratio * (double)(sum + n); @@ return 0 && (double)(inflight + 1) * (double)n > ratio * (double)(sum + n); @@ pdrouter test_affinity @@ ^router_(unit_affinity|affinity_soft_overload)$
affinity_hard_as_soft @@ router/workers/pool_pick.c @@ if (f->affinity == PDR_AFFINITY_SOFT && @@ if (f->affinity != PDR_AFFINITY_OFF && @@ pdrouter test_affinity @@ ^router_(unit_affinity|affinity_hard_overload)$
affinity_keyed_by_process_id @@ router/workers/pool_pick.c @@ keys[i] = c.w[i]->ring_key; @@ keys[i] = c.w[i]->uid; @@ pdrouter test_affinity @@ ^router_(unit_affinity|affinity_replicas)$
affinity_moved_as_hit @@ router/workers/pool_pick.c @@ outcome = home == w ? PDR_AFFINITY_HIT : PDR_AFFINITY_MOVED; @@ outcome = PDR_AFFINITY_HIT; @@ pdrouter test_affinity @@ ^router_(unit_affinity|affinity_unhealthy)$
affinity_no_body_key @@ router/pd/request.c @@ pdr__pd_session_body(x); @@ (void)x; @@ pdrouter @@ ^router_affinity_header_order$
affinity_unstable_on_removal @@ router/workers/affinity.c @@ uint64_t w = pdr_affinity_weight(session, ring_keys[i]); @@ uint64_t w = pdr_affinity_weight(session ^ (ok != NULL), ring_keys[i]); @@ test_affinity @@ ^router_unit_affinity$
migration_never @@ router/pd/legs.c @@ moved = pdr__pd_migrate(x, pdr_leg_strerror(leg, err), 1); @@ moved = 0; @@ pdrouter pdsim @@ ^router_migration_(generate_text|completions|chat|idle)$
migration_never_on_kv_failure @@ router/pd/kv.c @@ int moved = pdr__pd_migrate(x, why, 0); @@ int moved = 0; @@ pdrouter pdsim @@ ^router_migration_kv_lost$
migration_second_id @@ router/util/resume.c @@ if (s->id[0] != '\0' && json_is_string(json_object_get(j, "id"))) @@ if (0) @@ pdrouter pdsim test_resume @@ ^router_(migration_(completions|chat)|unit_resume)$
migration_second_role @@ router/util/resume.c @@ json_object_del(delta, "role"); @@ (void)0; @@ pdrouter pdsim test_resume @@ ^router_(migration_chat|unit_resume)$
migration_usage_unmoved @@ router/util/resume.c @@ move_tokens(usage, s->base_tokens); @@ (void)0; @@ pdrouter pdsim test_resume @@ ^router_(migration_(completions|chat)|unit_resume)$
migration_limit_unlowered @@ router/util/resume.c @@ n -= (int64_t)k; @@ (void)k; @@ pdrouter pdsim test_resume @@ ^router_(migration_(generate_text|completions)|unit_resume)$
migration_half_events @@ router/pd/migrate_relay.c @@ size_t end = *final ? in->len : pdr_resume_events_end(in->p ? in->p : "", in->len); @@ size_t end = in->len; @@ pdrouter pdsim @@ ^router_migration_half_event$
migration_budget_ignored @@ router/pd/migrate.c @@ if (x->migrations >= x->conf->migration.max_attempts) { @@ if (0) { @@ pdrouter pdsim @@ ^router_migration_(budget|half_event)$
migration_switch_ignored @@ router/pd/request.c @@ x->mig_possible = c->migration.enabled && pr.stream; @@ x->mig_possible = pr.stream; @@ pdrouter pdsim @@ ^router_migration_disabled$
migration_n_movable @@ router/util/resume.c @@ if (member_is(o, "n", above_one)) @@ if (0) @@ pdrouter pdsim test_resume @@ ^router_(migration_refused|unit_resume)$
migration_second_head @@ router/pd/advance.c @@ pdr__pd_resume_response(x); @@ pdr__pd_start_client_response(x); @@ pdrouter pdsim @@ ^router_migration_(completions|chat)$
admission_body_priority_ignored @@ router/fleet/admission_tag.c @@ if (!named && cl != NULL && c->admission.priority_field && body_priority(body, &prio)) { @@ if (0) { @@ pdrouter pdsim @@ ^router_admission_fairq_body_priority$
disagg_prefill_cache_decides @@ router/pd/pick.c @@ pdr_disagg_measure(text, tlen, solo.matched_known ? solo.matched : 0, &in); @@ pdr_disagg_measure(text, tlen, info.matched_known ? info.matched : 0, &in); @@ pdrouter pdsim @@ ^router_disagg_vllm_cached_on_prefill_only$
tokenizer_no_byte_fallback @@ tokenizer/tokenizer_spm.c @@ if (t->byte_fallback) { @@ if (0) { @@ pdtok test_tokenizer @@ ^tokenizer_(ref_spm_meta|ref_spm_gemma|unit)$
tokenizer_metaspace_first_as_always @@ tokenizer/tokenizer_spm.c @@ (t->meta_prepend == PDR__META_FIRST && first)) && @@ (t->meta_prepend == PDR__META_FIRST)) && @@ pdtok test_tokenizer @@ ^tokenizer_(ref_spm_meta|unit)$
tokenizer_prepend_ignored @@ tokenizer/tokenizer_spm.c @@ } else if (s->kind == PDR__NORM_PREPEND) { @@ } else if (0) { @@ pdtok test_tokenizer @@ ^tokenizer_(ref_spm_legacy|unit)$
jinja_no_trim_blocks @@ tokenizer/jinja_lex.c @@ } else if (block && sign != '+' && i < n @@ } else if (0 && block && sign != '+' && i < n @@ pdjinja test_jinja @@ ^jinja_(unit|vs_jinja2)$
jinja_tojson_key_separator @@ tokenizer/jinja_json.c @@ put_s(r, o, ": "); @@ put_s(r, o, ":"); @@ pdjinja test_jinja @@ ^jinja_(unit|vs_jinja2)$
jinja_loop_last_never @@ tokenizer/jinja_eval.c @@ loop->v[L_LAST] = pdr__jj_bool(i == n - 1); @@ loop->v[L_LAST] = pdr__jj_bool(i == n); @@ pdjinja test_jinja @@ ^jinja_(unit|vs_jinja2)$
jinja_iteration_limit_ignored @@ tokenizer/jinja.c @@ if (r->iters > r->t->limits.max_loop_iterations) @@ if (0 && r->iters > r->t->limits.max_loop_iterations) @@ test_jinja @@ ^jinja_unit$
decode_refused_waits_for_prefill @@ router/pd/advance.c @@ int d_refused = x->at.d_done && x->at.d_err == PDR_ECONNREFUSED; @@ int d_refused = 0; @@ pdrouter pdsim @@ ^router_retry_decode_refused$
chat_template_unused @@ router/workers/token_ids.c @@ const pdr_chat_template_t *ct = pdr_tokenizer_extra(tk); @@ const pdr_chat_template_t *ct = NULL; @@ pdrouter pdsim pdtok @@ ^tokenizer_chat_template$
pool_tokenizer_ignored @@ router/core/tokenizer_ref.c @@ for (size_t i = 0; pool != NULL && i < r->n_pool_tokenizers; i++) @@ for (size_t i = 0; pool != NULL && i < 0 * r->n_pool_tokenizers; i++) @@ pdrouter pdsim pdtok @@ ^tokenizer_(pools|pool_reload)$
pool_tokenizer_not_loaded @@ router/core/tokenizer_ref.c @@ if (pl->tokenizer == NULL) @@ if (1 || pl->tokenizer == NULL) @@ pdrouter pdsim pdtok @@ ^tokenizer_(pools|pool_reload)$
pool_tokenizer_parsed_again @@ router/core/tokenizer_ref.c @@ *tok = have ? loaded(r, next, file, st) : NULL; @@ *tok = have && 0 ? loaded(r, next, file, st) : NULL; @@ pdrouter pdsim pdtok @@ ^tokenizer_pool_reload$
pool_tokenizer_error_unplaced @@ router/core/tokenizer_ref.c @@ pool_err(c, i, err, errlen); @@ (void)pool_err; @@ pdrouter pdsim pdtok @@ ^tokenizer_pool_reload$
unknown_model_uncounted @@ router/workers/token_ids.c @@ unknown_model(pr, reason, unknown_counted); @@ (void)unknown_model; @@ pdrouter pdsim pdtok @@ ^tokenizer_pools$
unknown_model_counted_per_need @@ router/workers/token_ids.c @@ if (counted != NULL && *counted) @@ if (0 && counted != NULL && *counted) @@ pdrouter pdsim pdtok @@ ^tokenizer_pools$
unknown_model_for_input_ids @@ router/workers/token_ids.c @@ return 0; /* ids in the body: no tokenizer needed */ @@ (void)0; @@ pdrouter pdsim pdtok @@ ^tokenizer_pools$
unknown_model_any_pool @@ router/pd/attempt.c @@ if (text != NULL && r->pool.kvindex != NULL && x->precise) { @@ if (text != NULL && r->pool.kvindex != NULL) { @@ pdrouter pdsim pdtok @@ ^tokenizer_pools$
ids_fallback_not_logged @@ router/pd/attempt.c @@ x->at.ids_fallback = fb >= 0 ? pdr_fallback_names[fb] : NULL; @@ x->at.ids_fallback = fb >= 0 ? NULL : NULL; @@ pdrouter pdsim pdtok @@ ^tokenizer_pools$
kv_index_cold_uncounted @@ routing/kvindex.c @@ ix->cold += ws[i] != NULL && !out[i].synced; @@ (void)0; @@ pdrouter pdsim @@ ^router_kv_events_gap$
health_generate_any_pair @@ router/control/compat.c @@ c->compat.enabled ? &cf : NULL) @@ NULL) @@ pdrouter pdsim @@ ^router_compat_pairs_no_pair$
sidecar_takes_pool_decodes @@ router/control/reload.c @@ if (role == PDR_ROLE_DECODE && run->config->sidecar.enabled) { @@ if (0) { @@ pdrouter @@ ^router_discovery_kubernetes_inference_pool_sidecar$
gateway_subset_ignored @@ router/gateway/epp_workers.c @@ .only = q->has_subset ? only : NULL, @@ .only = NULL, @@ pdrouter @@ ^gateway_epp_subset$
gateway_no_prefill_header @@ router/gateway/epp_answer.c @@ if (prefill != NULL) { @@ if (0) { @@ pdrouter @@ ^gateway_epp_pick$
gateway_body_not_given_back @@ router/gateway/epp_answer.c @@ (void)pdr_epp_answer_body(q->s, PDR_EPP_REQUEST_BODY, (const uint8_t *)q->body, q->len, 1); @@ (void)0; @@ pdrouter @@ ^gateway_epp_(pick|drain)$
gateway_admission_ignored @@ router/gateway/epp_pick.c @@ pdr__gw_admit_refused(q, adm); @@ pdr__gw_pick(q); @@ pdrouter @@ ^gateway_epp_admission$
gateway_health_always_ready @@ router/gateway/epp_pick.c @@ int ok = !pdr_router_stopping(g->r) && g->ready(g->r, why, sizeof(why)); @@ int ok = 1; (void)why; @@ pdrouter @@ ^gateway_epp_drain$
gateway_prefill_not_picked @@ router/gateway/epp_workers.c @@ if (has_prefills(r, q->pool)) { @@ if (0 && has_prefills(r, q->pool)) { @@ pdrouter @@ ^gateway_epp_(pick|drain)$
gateway_decode_not_in_flight @@ router/gateway/epp_workers.c @@ pdr_worker_track(q->dw, 1); /* in flight until @@ /* in flight until @@ pdrouter @@ ^gateway_epp_pick$
pick_only_list_ignored @@ router/workers/pool_pick.c @@ if (info != NULL && info->only != NULL && usable(v, info->only, info->n_only)) @@ if (0) @@ pdrouter @@ ^gateway_epp_subset$
epp_pick_keeps_route_cache @@ router/epp/extproc_answer.c @@ common.clear_route_cache = 1; @@ common.clear_route_cache = 0; @@ epp_testpicker @@ ^epp_pick$
epp_pick_metadata_namespace @@ router/epp/extproc_answer.c @@ outer_e.key = (char *)PDR_EPP_METADATA_NS; @@ outer_e.key = (char *)"envoy.lb.other"; @@ epp_testpicker @@ ^epp_(pick|bodyless)$
epp_unknown_method_ok @@ router/epp/grpc_call.c @@ finishf(call, PDR_GRPC_UNIMPLEMENTED, "unknown method %s", call->path); @@ finishf(call, PDR_GRPC_OK, "unknown method %s", call->path); @@ epp_testpicker @@ ^epp_unknown_method$
epp_message_ceiling_ignored @@ router/epp/grpc_frame.c @@ if (r->msg_len > r->max_message) { @@ if (0 && r->msg_len > r->max_message) { @@ epp_testpicker test_grpc_frame @@ ^epp_(grpc_frame|too_big)$
epp_health_always_serving @@ router/epp/health.c @@ resp.status = status_of(e, req->service); @@ resp.status = status_of(e, "liveness"); @@ epp_testpicker @@ ^epp_health$
epp_subset_hint_ignored @@ router/epp/extproc.c @@ m->has_subset = 1; @@ m->has_subset = 0; @@ epp_testpicker @@ ^epp_subset$
epp_stream_ceiling_ignored @@ router/epp/grpc_conn.c @@ {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, s->lim.max_streams}, @@ {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, 1024}, @@ epp_testpicker @@ ^epp_stream_limit$
infpool_selector_kept @@ router/discovery/discovery_k8s_pool.c @@ p->spec = *next; @@ p->spec.nports = next->nports; @@ pdrouter @@ ^router_discovery_kubernetes_inference_pool$
infpool_first_port_only @@ router/discovery/discovery_k8s_pods.c @@ int per = s->rc.nports > 0 ? s->rc.nports : 1; @@ int per = 1; @@ pdrouter test_k8s_discovery_pure @@ ^(discovery_k8s_unit|router_discovery_kubernetes_inference_pool)$
infpool_h2c_accepted @@ router/discovery/discovery_k8s_pods.c @@ if (proto != NULL && strcmp(proto, "http") != 0) { @@ if (proto != NULL && strcmp(proto, "http") != 0 && 0) { @@ pdrouter test_k8s_discovery_pure @@ ^(discovery_k8s_unit|router_discovery_kubernetes_inference_pool)$
sidecar_malformed_accepted @@ router/pd/sidecar.c @@ if (!ok) { @@ if (0 && !ok) { @@ pdrouter pdsim @@ ^router_sidecar_malformed$
sidecar_allowlist_open @@ router/pd/sidecar.c @@ if (state == PDR_ADDR_NONE) { @@ if (0 && state == PDR_ADDR_NONE) { @@ pdrouter pdsim @@ ^router_sidecar_not_in_pool$
sidecar_allowlist_any_port @@ router/workers/pool_addr.c @@ if (c->port != port || c->host == NULL) @@ if (c->host == NULL) @@ pdrouter pdsim @@ ^router_sidecar_not_in_pool$
sidecar_header_ignored @@ router/pd/sidecar.c @@ x->at.pw = w; @@ pdr_worker_unref(w); @@ pdrouter pdsim @@ ^router_sidecar_named_(sglang|vllm)$
sidecar_down_picks_another @@ router/pd/sidecar.c @@ if (w == NULL) { @@ if (0 && w == NULL) { @@ pdrouter pdsim @@ ^router_sidecar_dead_named$
sidecar_draining_refused @@ router/pd/sidecar.c @@ if (outcome == PDR_SC_DRAINING) { @@ if (0 && outcome == PDR_SC_DRAINING) { @@ pdrouter pdsim @@ ^router_sidecar_draining_named$
sidecar_header_forwarded @@ router/front/fwdheaders.c @@ if (sc != NULL && eq(name, nlen, sc, sc_len)) @@ if (0 && sc != NULL && eq(name, nlen, sc, sc_len)) @@ pdrouter pdsim @@ ^router_sidecar_named_sglang$
sidecar_many_decodes @@ config/checks.c @@ if (c->n_decode != 1) { @@ if (0 && c->n_decode != 1) { @@ pdrouter @@ ^router_sidecar_config$
EOF
)

die() {
    echo "mutate.sh: $*" >&2
    exit 2
}

LIST=0
if [ "${1:-}" = "-l" ]; then
    LIST=1
    shift
fi
FILTER=${1:-.}
ROOT=$(git -C "$(dirname "$0")" rev-parse --show-toplevel) || die "not in a git checkout"
SCRATCH=${PDR_MUTATE_DIR:-$ROOT/build-mutate}
SRC=$SCRATCH/src
BUILD=$SCRATCH/build
JOBS=${JOBS:-$(nproc)}

# The mutations as records: one per line, fields separated by the unit separator, newlines inside a field
# written as \n (the list above allows a mutation to span a few lines).
records() {
    printf '%s\n' "$MUTATIONS" | python3 -c '
import sys
text = sys.stdin.read()
recs, cur = [], ""
for line in text.split("\n"):
    cur = line if not cur else cur + "\n" + line
    if cur.count(" @@ ") >= 5:
        recs.append(cur)
        cur = ""
if cur.strip():
    sys.exit("mutate.sh: an unfinished mutation at the end of the list: %r" % cur[:200])
for r in recs:
    f = [x.strip() if i in (0, 1, 4, 5) else x for i, x in enumerate(r.split(" @@ "))]
    print("\x1f".join(x.replace("\\", "\\\\").replace("\n", "\\n") for x in f))
'
}

if [ "$LIST" = 1 ]; then
    records | while IFS=$'\x1f' read -r name file _ _ _ tests; do
        printf '%-34s %-28s %s\n' "$name" "$file" "$tests"
    done
    exit 0
fi

# The scratch copy: the tracked files and the untracked ones git does not ignore, as they are now.
echo "== copying the working tree to $SRC"
mkdir -p "$SRC" || die "cannot create $SRC"
# Only the files whose content differs are written (with a new time), so that the build redoes exactly
# what changed; a file left mutated by an interrupted run is put back the same way.
(cd "$ROOT" && git ls-files -co --exclude-standard -z | python3 -c '
import os, sys
dst = sys.argv[1]
for rel in sys.stdin.buffer.read().decode().split("\0"):
    if not rel or not os.path.isfile(rel):
        continue
    with open(rel, "rb") as f:
        data = f.read()
    out = os.path.join(dst, rel)
    try:
        with open(out, "rb") as f:
            same = f.read() == data
    except OSError:
        same = False
    if not same:
        os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
        with open(out, "wb") as f:
            f.write(data)
        os.chmod(out, os.stat(rel).st_mode & 0o777)
    if os.path.exists(out + ".orig"):
        os.unlink(out + ".orig")
' "$SRC") || die "copying the tree failed"
# The files the list mutates are recompiled whatever their times say: an interrupted run may have left
# objects built from a mutant behind.
records | while IFS=$'\x1f' read -r _ file _ _ _ _; do
    [ -f "$SRC/$file" ] && touch "$SRC/$file"
done
echo "== configuring and building $BUILD (the first run builds everything)"
# Warnings stay warnings here (PDR_WERROR off): a mutant is judged by the tests, not by the compiler.
cmake -S "$SRC" -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPDR_WERROR=OFF >/dev/null 2>&1 ||
    die "cmake configure failed"
cmake --build "$BUILD" -j "$JOBS" >"$SCRATCH/build.log" 2>&1 || die "the unmutated tree does not build: $SCRATCH/build.log"

# The baseline: every named test passes on the unmutated tree, or a mutant's failing test proves nothing.
if [ "${PDR_MUTATE_BASELINE:-1}" = 1 ]; then
    all_tests=$(records | while IFS=$'\x1f' read -r name _ _ _ _ tests; do
        echo "$name" | grep -Eq -- "$FILTER" && printf '%s\n' "$tests"
    done | sort -u | paste -sd'|')
    if [ -n "$all_tests" ]; then
        echo "== baseline: the named tests on the unmutated tree"
        if ! (cd "$BUILD" && ctest -j "$JOBS" -R "$all_tests" >"$SCRATCH/baseline.log" 2>&1); then
            grep -E '^[[:space:]]*[0-9]+ - ' "$SCRATCH/baseline.log" >&2
            die "the unmutated tree fails the tests above ($SCRATCH/baseline.log): fix that first"
        fi
    fi
fi

# apply FILE OLD NEW: replaces the one occurrence of OLD. Exit 3 when OLD does not occur exactly once.
apply() {
    python3 - "$1" "$2" "$3" <<'PY'
import sys
path, old, new = sys.argv[1], sys.argv[2], sys.argv[3]
unesc = lambda s: s.replace("\\n", "\n").replace("\\\\", "\\")
old, new = unesc(old), unesc(new)
text = open(path).read()
n = text.count(old)
if n != 1:
    print("the text occurs %d times in %s" % (n, path))
    sys.exit(3)
open(path, "w").write(text.replace(old, new, 1))
PY
}

killed=() survived=() broken=()
total=0
while IFS=$'\x1f' read -r name file old new targets tests; do
    echo "$name" | grep -Eq -- "$FILTER" || continue
    total=$((total + 1))
    f=$SRC/$file
    [ -f "$f" ] || { broken+=("$name: no file $file"); continue; }
    n_tests=$(cd "$BUILD" && ctest -N -R "$tests" | sed -n 's/^Total Tests: //p')
    if [ "${n_tests:-0}" = 0 ]; then
        broken+=("$name: no test matches $tests")
        continue
    fi
    cp "$f" "$f.orig"
    if ! why=$(apply "$f" "$old" "$new"); then
        broken+=("$name: $why")
        mv "$f.orig" "$f"
        continue
    fi
    echo "== $name: $file, $n_tests tests ($tests)"
    # shellcheck disable=SC2086 # targets is a list
    if ! cmake --build "$BUILD" -j "$JOBS" --target $targets >"$SCRATCH/$name.build.log" 2>&1; then
        echo "   killed: it does not compile ($SCRATCH/$name.build.log)"
        broken+=("$name: the mutated tree does not compile; make the mutation compile")
    elif (cd "$BUILD" && ctest -j "$JOBS" -R "$tests" >"$SCRATCH/$name.test.log" 2>&1); then
        echo "   SURVIVED: every test passed ($SCRATCH/$name.test.log)"
        survived+=("$name ($file; tests $tests)")
    else
        failed=$(sed -En 's/^[[:space:]]*[0-9]+ - ([^ ]+) .*/\1/p' "$SCRATCH/$name.test.log" | tr '\n' ' ')
        echo "   killed by: $failed"
        killed+=("$name: $failed")
    fi
    # Back to the original text, with a new time: the next build recompiles it.
    mv "$f.orig" "$f"
    touch "$f"
done < <(records)

# The restored tree: rebuild it so that the next run starts from the unmutated binaries.
cmake --build "$BUILD" -j "$JOBS" >"$SCRATCH/build.log" 2>&1 || echo "mutate.sh: the restored tree does not build"

echo
echo "==== mutation summary: $total mutations, ${#killed[@]} killed, ${#survived[@]} survived, ${#broken[@]} errors in the list ===="
for k in "${killed[@]+"${killed[@]}"}"; do echo "  killed    $k"; done
for s in "${survived[@]+"${survived[@]}"}"; do echo "  SURVIVED  $s"; done
for b in "${broken[@]+"${broken[@]}"}"; do echo "  ERROR     $b"; done
[ "${#survived[@]}" = 0 ] && [ "${#broken[@]}" = 0 ] && [ "$total" -gt 0 ]
