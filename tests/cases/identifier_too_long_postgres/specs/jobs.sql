CREATE TABLE "email_jobs_for_the_marketing_department_of_the_european_division_x" (
    id BIGSERIAL PRIMARY KEY,
    payload JSONB NOT NULL
);
