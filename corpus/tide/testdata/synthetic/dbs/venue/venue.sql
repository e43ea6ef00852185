-- A small venue database for the synthetic TIDE samples (written for avtgym).
CREATE TABLE stadium (
  stadium_id INTEGER PRIMARY KEY,
  name TEXT NOT NULL,
  capacity INTEGER NOT NULL,
  highest INTEGER NOT NULL,
  average INTEGER NOT NULL
);
CREATE TABLE concert (
  concert_id INTEGER PRIMARY KEY,
  stadium_id INTEGER NOT NULL REFERENCES stadium (stadium_id),
  year TEXT NOT NULL,
  theme TEXT NOT NULL
);
INSERT INTO stadium VALUES
  (1, 'North Park', 50000, 41000, 22000),
  (2, 'River Arena', 30000, 26000, 15000),
  (3, 'Hill Dome', 12000, 9000, 5000);
INSERT INTO concert VALUES
  (1, 1, '2014', 'Spring'),
  (2, 2, '2014', 'Summer'),
  (3, 3, '2015', 'Autumn'),
  (4, 1, '2015', 'Winter'),
  (5, 2, '2013', 'Spring'),
  (6, 1, '2013', 'Summer');
