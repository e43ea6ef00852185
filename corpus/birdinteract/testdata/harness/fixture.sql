-- The fixture database of harness_cases.json: a few cranes with one
-- column of each type whose conversion BIRD-Interact's harness treats
-- specially, and 12,000 moves for the 10,000-row truncation.
CREATE TABLE cranes (
  id integer PRIMARY KEY,
  name text NOT NULL,
  rate numeric,
  rate_f double precision,
  specs jsonb,
  specs_json json,
  installed timestamp,
  inspected date,
  tags text[],
  service interval,
  active boolean,
  shift_start time,
  ratings numeric[],
  loads integer[]
);
INSERT INTO cranes VALUES
 (1, 'Atlas',  7.53,  7.53,  '{"b": 1, "a": [1, 2.0]}', '{"b": 1,  "a": [1, 2.0]}', '2024-03-01 14:05:00', '2024-03-01', '{north,big}', '1 mon 2 days',  true,  '08:30:00', '{1.5,2.25}', '{10,20}'),
 (2, 'Boreas', 7.50,  7.5,   '{"x": "Zürich"}',         '{"x": "Zürich"}',           '2023-11-30 23:59:59', '2023-11-30', '{south}',     '1 year',        false, '17:00:00', '{3}',        '{30}'),
 (3, 'Castor', 2.675, 2.675, '1',                       '1.0',                       '2022-06-15 00:00:00', '2022-06-15', '{}',          '36 hours',      true,  '00:00:01', '{}',         '{}'),
 (4, 'Deimos', 0.125, 0.125, '[1, 1.0, "a"]',           '[1, 1.0, "a"]',             NULL,                  NULL,         NULL,          NULL,            NULL,  NULL,       NULL,         NULL),
 (5, 'Eos',    1.005, 1.005, '{"k": null}',             '{"k": null}',               '2021-01-01 06:00:00', '2021-01-01', '{"a b",c}',   '-1 days +02:00', true, '12:00:00', '{NULL}',     '{NULL,5}'),
 (6, 'Fenrir', 'NaN', 'NaN', '{"n": 12345678901234567890}', '{"n": 1e400}',         '2020-02-29 12:00:00', '2020-02-29', '{x}',         '00:00:00.5',    false, '23:59:59.999999', '{1}', '{1}');

CREATE TABLE moves AS
  SELECT g AS id, (g % 6) + 1 AS crane_id, g * 3 AS tons
  FROM generate_series(1, 12000) AS g;
ALTER TABLE moves ADD PRIMARY KEY (id);

