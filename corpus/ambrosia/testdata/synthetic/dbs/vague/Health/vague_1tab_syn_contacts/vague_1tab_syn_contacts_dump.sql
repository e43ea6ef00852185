CREATE TABLE Staff (Name TEXT, Phone TEXT, Email TEXT);
INSERT INTO Staff VALUES ('Ann Lee', '555-0101', 'ann@example.org');
INSERT INTO Staff VALUES ('Bob Rao', '555-0102', 'bob@example.org');
