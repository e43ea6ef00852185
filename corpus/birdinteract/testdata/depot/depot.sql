CREATE TABLE routes (
  route_id INTEGER PRIMARY KEY,
  region TEXT NOT NULL,
  driver TEXT NOT NULL
);
CREATE TABLE parcels (
  parcel_id INTEGER PRIMARY KEY,
  route_id INTEGER NOT NULL REFERENCES routes(route_id),
  weight_kg REAL NOT NULL,
  late_days INTEGER NOT NULL,
  returned INTEGER NOT NULL
);
INSERT INTO routes VALUES
 (1,'North','Ana'),
 (2,'North','Ben'),
 (3,'South','Cleo'),
 (4,'East','Dan');
INSERT INTO parcels VALUES
 (1,1,25.0,0,0),
 (2,1,3.5,2,0),
 (3,2,31.2,4,1),
 (4,2,12.0,0,0),
 (5,3,40.0,5,0),
 (6,3,1.25,0,1),
 (7,4,22.5,3,0),
 (8,4,7.75,1,0);
