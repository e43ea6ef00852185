CREATE TABLE Staff (Name TEXT, Role TEXT, Workplace TEXT);
INSERT INTO Staff VALUES ('Ann Lee', 'Cardiologist', 'St Mary Hospital');
INSERT INTO Staff VALUES ('Bob Rao', 'Cardiologist', 'City Clinic');
INSERT INTO Staff VALUES ('Cid Roy', 'Nurse', 'St Mary Hospital');
INSERT INTO Staff VALUES ('Dee Fox', 'Nurse', 'City Clinic');
INSERT INTO Staff VALUES ('Eve Kim', 'Surgeon', 'St Mary Hospital');
INSERT INTO Staff VALUES ('Fay Ito', 'Surgeon', 'City Clinic');
