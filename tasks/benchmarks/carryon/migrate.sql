-- A warehouse written before CarryOnBench's conversations were the engine's episodes holds
-- them in tables `conversations` and `turns`: their rows move to `episodes` and
-- `episode_turns` (read back through the views of the same names, views.sql), then the
-- tables go. Run by Warehouse.init() once, while `conversations` is still a table
-- (the spec's views.migrate). {{benchmark}} is the spec's name.
-- An episode's termination is what the play loop gives such a conversation: the oracle's
-- one turn is single_turn, a script played to its end turn_cap, a failed call error.
INSERT OR REPLACE INTO episodes
    (episode_id, benchmark, item_id, condition, target, user_policy, script, status,
     termination, n_turns, error, error_call_hash, run_id)
SELECT c.conversation_id, '{{benchmark}}', c.query_id, c.condition, c.target,
       coalesce(bc.user_policy, CASE WHEN c.flow_id = 'oracle' THEN 'single_turn' ELSE 'scripted' END),
       CASE WHEN c.flow_id = 'oracle' THEN NULL ELSE c.flow_id END,
       c.status,
       CASE WHEN c.status NOT IN ('completed', 'move_check_failed') THEN 'error'
            WHEN c.flow_id = 'oracle' THEN 'single_turn' ELSE 'turn_cap' END,
       coalesce(c.n_turns, (SELECT count(*) FROM turns t WHERE t.conversation_id = c.conversation_id)),
       c.error, c.error_call_hash, c.run_id
FROM conversations c
LEFT JOIN bench_conditions bc ON bc.benchmark = '{{benchmark}}' AND bc.condition = c.condition;

INSERT OR REPLACE INTO episode_turns
    (episode_id, position, role, model_turn, content, call_hash, blocked)
SELECT conversation_id, position, role, model_turn, content, call_hash, blocked FROM turns;

DROP TABLE turns;
DROP TABLE conversations;
