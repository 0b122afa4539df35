-- A warehouse written before CarryOnBench's judgments were the engine's verdicts holds them
-- in tables `judgment_sets`, `item_judgments`, `safety_judgments` and `judge_votes`: their
-- rows move to `verdict_sets`, `verdicts` and `verdict_votes` (read back through the views
-- of the same names, views.sql), then the tables go, with `judged_batches` (the judge
-- stage's skip list: the verdicts stage has none). Run by Warehouse.init() once, while
-- `item_judgments` is still a table (the spec's views.migrate), after migrate.sql.
-- A set's args keep what the table recorded (whether safety saw the history); the set ids,
-- and so every view's choice of set, are unchanged.
INSERT OR REPLACE INTO verdict_sets
    (judgment_set_id, benchmark, kind, judge, prompt_version, created, run_id, judges,
     item_version, args)
SELECT judgment_set_id, '{{benchmark}}', kind,
       array_to_string(from_json(judges, '["VARCHAR"]'), ', '), prompt_version, created,
       run_id, judges, checklist_version,
       CASE WHEN sees_history THEN '{"sees_history": true}' END
FROM judgment_sets;

INSERT OR REPLACE INTO verdicts
    (judgment_set_id, episode_id, position, measure, kind, model_turn, value, label, reason,
     call_hash, evidence, item_version)
SELECT judgment_set_id, conversation_id, position, 'fulfilled:' || item_id, 'benutil',
       model_turn, CASE WHEN fulfilled IS NULL THEN NULL WHEN fulfilled THEN 1.0 ELSE 0.0 END,
       NULL, reason, call_hash, evidence, checklist_version
FROM item_judgments;

INSERT OR REPLACE INTO verdicts
    (judgment_set_id, episode_id, position, measure, kind, model_turn, value, label, reason,
     call_hash, evidence, item_version)
SELECT judgment_set_id, conversation_id, position, 'score', 'safety', model_turn,
       CAST(score AS DOUBLE), NULL, reason, call_hash, NULL, NULL
FROM safety_judgments;

-- A vote's turn number is its turn's (votes never stored it).
INSERT OR REPLACE INTO verdict_votes
    (judgment_set_id, episode_id, position, measure, judge, kind, model_turn, value, label,
     reason, call_hash, evidence, item_version)
SELECT v.judgment_set_id, v.conversation_id, v.position,
       CASE WHEN s.kind = 'benutil' THEN 'fulfilled:' || v.item_id ELSE 'score' END, v.judge,
       s.kind, coalesce(t.model_turn, CAST((v.position + 1) // 2 AS INTEGER)),
       CAST(v.value AS DOUBLE), NULL, v.reason, v.call_hash, NULL, NULL
FROM judge_votes v
JOIN judgment_sets s ON s.judgment_set_id = v.judgment_set_id
LEFT JOIN episode_turns t ON t.episode_id = v.conversation_id AND t.position = v.position;

-- The verdicts stage reads each judged query as the item the episodes stage stores: a home
-- whose conversations were never replayed since they moved has none, so each query of its
-- episodes gets the item its loader makes (prompt `query`: the query verbatim; meta:
-- category, domain, source), unless one is stored.
INSERT OR IGNORE INTO bench_items (benchmark, item_id, source_row, prompts, hidden, meta, run_id)
SELECT '{{benchmark}}', q.query_id, CAST(row_number() OVER (ORDER BY q.query_id) - 1 AS INTEGER),
       CAST(json_object('query', q.query) AS VARCHAR), '{}',
       CAST(json_object('category', q.category, 'domain', q.domain, 'source', q.source) AS VARCHAR),
       NULL
FROM queries q
WHERE q.query IS NOT NULL
  AND q.query_id IN (SELECT item_id FROM episodes WHERE benchmark = '{{benchmark}}');

DROP TABLE judge_votes;
DROP TABLE safety_judgments;
DROP TABLE item_judgments;
DROP TABLE judgment_sets;
DROP TABLE IF EXISTS judged_batches;
