CREATE TABLE "email_jobs_for_the_marketing_department_of_the_european_regions_" (
    id BIGSERIAL PRIMARY KEY,
    payload JSONB NOT NULL
);
